"""The Java remoting ``TransactionMQProducer`` (client 5.3.3, through the lab driver) against a
target, Apache RocketMQ or ``postbox broker`` (``remoting_target``): local transactions that
commit, roll back, or answer "unknown" and are settled by the broker's check-back
(CHECK_TRANSACTION_STATE answered by ``checkLocalTransaction``); a pull then sees exactly the
committed ones, each once, with its tag, keys and user properties. ``postbox transactions
list --broker`` shows a half left open on either target."""

from __future__ import annotations

import pytest

from tests.cli.cli_support import run_json
from tests.lab.remoting_checks import body_of, create_topics
from tests.support.remoting_targets import RemotingTarget

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

TOPIC = "PeersTransactions"
PENDING_TOPIC = "PeersPendingHalf"
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


def test_postbox_cli_lists_a_pending_half_through_the_broker(remoting_target: RemotingTarget):
    """``postbox transactions list --broker rocketmq://…`` finds a half whose producer left
    without ending it (the half and op topics pulled from the target), with its group, real
    topic and age."""
    target = remoting_target
    create_topics(target, PENDING_TOPIC)
    [sent] = target.driver.run("transaction", group="peers-tx-pending", linger_ms=0, messages=[
        {"topic": PENDING_TOPIC, "keys": ["tx-open"], "body": "left open", "outcome": "unknown"}])
    assert sent["local_state"] == "UNKNOW"
    listed = run_json("transactions", "list", "--broker", f"rocketmq://{target.namesrv}")
    [half] = [document for document in listed if document["unique_key"] == sent["msg_id"]]
    assert (half["producer_group"], half["real_topic"], half["body"]) == (
        "peers-tx-pending", PENDING_TOPIC, "left open")
    assert half["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC" and half["age_ms"] > 0
