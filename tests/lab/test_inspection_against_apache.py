"""``postbox … --broker rocketmq://…`` against the lab's live Apache RocketMQ (name server +
broker): the same commands that answer for a ``postbox broker`` answer for Apache's, through
the requests ``mqadmin`` makes. Names are unique per run, so runs share the lab."""

from __future__ import annotations

import os
import time

from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Message
from tests.cli.cli_support import run, run_json
from tests.support.polling import wait_until


def test_inspection_commands_answer_for_an_apache_broker(live_rocketmq) -> None:  # type: ignore[no-untyped-def]
    suffix = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    topic, group = f"inspect-{suffix}", f"inspectors-{suffix}"
    url = f"rocketmq://{live_rocketmq.namesrv}"
    with RemotingBroker(live_rocketmq.namesrv, timeout_ms=30_000) as remote:
        remote.create_topic(topic, 1)
        wait_until(lambda: remote.queue_ids(topic), timeout_s=60, what="the topic's route")
        sent = [remote.send(Message(topic, f"order {n}".encode(), keys=[f"o-{n}"]), queue_id=0)
                for n in range(3)]
        remote.commit_offset(group, topic, 0, 2)

    def indexed() -> bool:
        return run("query", "key", topic, "o-1", "--broker", url).exit_code == 0
    wait_until(indexed, timeout_s=60, what="the key index")
    [by_key] = run_json("query", "key", topic, "o-1", "--broker", url)
    assert by_key["body"] == "order 1"
    by_id = run_json("query", "id", sent[2].offset_msg_id, "--broker", url)
    assert by_id["body"] == "order 2"
    at = run_json("query", "offset", topic, "0", "0", "--broker", url)
    assert (at["status"], at["message"]["body"], at["max_offset"]) == ("FOUND", "order 0", 3)
    topics = {document["topic"]: document["queues"]
              for document in run_json("store", "topics", "--broker", url)}
    assert topics[topic] == [{"queue_id": 0, "min_offset": 0, "max_offset": 3}]
    [progress] = run_json("consumer", "progress", "-g", group, "--broker", url)
    [queue] = [q for q in progress["queues"] if q["topic"] == topic]
    assert (queue["committed_offset"], queue["lag"]) == (2, 1)
