"""``--broker rocketmq://…``: inspection and admin commands through a running ``postbox broker``
process (remoting requests, as against an Apache cluster), nothing read from a store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Message
from tests.cli.cli_support import assert_one_error_line, run, run_json
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

GROUP = "billing"
TOPIC = "orders"


@dataclass
class Served:
    server: BrokerProcess
    url: str
    unique_keys: list[str]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = BrokerProcess(tmp_path / "store", broker_conf=write_broker_conf(tmp_path)).start()
    try:
        url = f"rocketmq://{server.namesrv_address}"
        with RemotingBroker(server.namesrv_address) as remote:
            remote.create_topic(TOPIC, 1)
            keys = [remote.send(Message(TOPIC, f"order {n}".encode(), keys=[f"o-{n}"]),
                                queue_id=0).unique_key for n in range(4)]
            remote.commit_offset(GROUP, TOPIC, 0, 3)
            poison = remote.pull(GROUP, TOPIC, 0, 1, max_count=1,
                                 suspend_timeout_ms=5000).messages[0]
            remote.send_back(GROUP, poison, delay_level=-1, reason="bad amount")
            wait_until(lambda: remote.dead_letters(GROUP), what="the dead letter")
        yield Served(server, url, [key for key in keys if key is not None])
    finally:
        server.stop()


def test_commands_answer_through_the_broker(served: Served) -> None:
    [progress] = run_json("consumer", "progress", "-g", GROUP, "--broker", served.url)
    [queue] = [q for q in progress["queues"] if q["topic"] == TOPIC]
    assert (queue["committed_offset"], queue["max_offset"], queue["lag"]) == (3, 4, 1)

    [letter] = run_json("dlq", "list", "-g", GROUP, "--broker", served.url)
    assert (letter["original_topic"], letter["reason"]) == (TOPIC, "bad amount")
    assert letter["resent"] is None
    assert letter["body"] == "order 1"

    [found] = run_json("query", "unique-key", TOPIC, served.unique_keys[2], "--broker",
                       served.url)
    assert found["body"] == "order 2"
    by_id = run_json("query", "id", served.unique_keys[2], "--topic", TOPIC, "--broker",
                     served.url)
    assert by_id["msg_id"] == found["msg_id"]
    by_offset_msg_id = run_json("query", "id", found["msg_id"], "--broker", served.url)
    assert by_offset_msg_id["body"] == "order 2"
    [by_key] = run_json("query", "key", TOPIC, "o-3", "--broker", served.url)
    assert by_key["body"] == "order 3"
    at = run_json("query", "offset", TOPIC, "0", "1", "--broker", served.url)
    assert (at["status"], at["message"]["body"], at["max_offset"]) == ("FOUND", "order 1", 4)
    timed = run_json("query", "time", TOPIC, "0", str(found["store_timestamp_ms"]), "--broker",
                     served.url)
    assert timed["offset"] <= 2 and timed["message"] is not None


def test_store_stats_and_topics_through_the_broker(served: Served) -> None:
    topics = {document["topic"]: document["queues"]
              for document in run_json("store", "topics", "--broker", served.url)}
    assert topics[TOPIC] == [{"queue_id": 0, "min_offset": 0, "max_offset": 4}]
    assert f"%DLQ%{GROUP}" in topics
    [table] = run_json("store", "stats", "--broker", served.url)["brokers"].values()
    assert table["brokerActive"] == "true"


def test_resend_through_the_broker_reaches_the_group_only(served: Served) -> None:
    [document] = run_json("dlq", "resend", "-g", GROUP, "--offset", "0", "--broker", served.url)
    assert (document["topic"], document["original_topic"]) == (f"%RETRY%{GROUP}", TOPIC)
    with RemotingBroker(served.server.namesrv_address) as remote:
        result = remote.pull(GROUP, f"%RETRY%{GROUP}", document["queue_id"],
                             document["queue_offset"], max_count=1, suspend_timeout_ms=5000)
        pulled = result.messages
        assert [(view.body, view.properties["RETRY_TOPIC"]) for view in pulled] == [
            (b"order 1", TOPIC)]
    [progress] = run_json("consumer", "progress", "-g", GROUP, "--broker", served.url)
    [queue] = [q for q in progress["queues"] if q["topic"] == TOPIC]
    assert queue["max_offset"] == 4  # nothing went back to the topic other groups read
    [letter] = run_json("dlq", "list", "-g", GROUP, "--broker", served.url)
    assert letter["resent"]["count"] == 1  # found in the log: the copy names the dead letter
    assert letter["resent"]["last_msg_id"] == document["msg_id"]


def test_a_bad_url_and_a_unique_key_without_topic_are_one_error_line(served: Served):
    assert_one_error_line(run("dlq", "list", "-g", GROUP, "--broker", "http://x:1"),
                          "rocketmq://")
    assert_one_error_line(run("query", "id", served.unique_keys[0], "--broker", served.url),
                          "--topic")
