"""The Java remoting ``TransactionMQProducer`` (client 5.3.3, through the lab driver) against a
target, Apache RocketMQ or ``postbox broker`` (``remoting_target``): local transactions that
commit, roll back, or answer "unknown" and are settled by the broker's check-back
(CHECK_TRANSACTION_STATE answered by ``checkLocalTransaction``); a pull then sees exactly the
committed ones, each once, with its tag, keys and user properties."""

from __future__ import annotations

import pytest

from tests.lab.remoting_checks import body_of, create_topics
from tests.support.remoting_targets import RemotingTarget

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

TOPIC = "PeersTransactions"
LINGER_MS = {"apache": 45_000, "postbox": 15_000}  # Apache checks every 30 s, Postbox at 6 s


def test_java_transaction_producer_commits_rolls_back_and_answers_checks(
        remoting_target: RemotingTarget):
    target = remoting_target
    create_topics(target, TOPIC)
    cases = [("commit", None), ("rollback", None), ("unknown", "commit"),
             ("unknown", "rollback")]
    messages = [{"topic": TOPIC, "tags": "tx", "keys": [f"tk-{i}"], "properties": {"n": str(i)},
                 "body": f"tx {outcome} {check}", "outcome": outcome,
                 **({"check": check} if check else {})}
                for i, (outcome, check) in enumerate(cases)]
    sent = target.driver.run("transaction", messages=messages,
                             linger_ms=LINGER_MS[target.name])
    assert [result["local_state"] for result in sent] == [
        "COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW", "UNKNOW"]
    assert {result["status"] for result in sent} == {"SEND_OK"}
    pulled = target.driver.run("pull", topics=[TOPIC])["messages"]
    assert sorted(body_of(m) for m in pulled) == [b"tx commit None", b"tx unknown commit"]
    for message in pulled:
        assert message["tags"] == "tx" and message["properties"]["PGROUP"]
        assert message["uniq_key"] in {result["msg_id"] for result in sent}
