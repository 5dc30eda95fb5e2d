"""The official Go client v2 (rocketmq-client-go, remoting) against both targets.

The Go producer sends singles (tags, keys, unicode user properties and bodies) and a batch; the
Java pull consumer reads them back byte for byte under the unique keys the Go client returned;
the Go push consumer receives them all, a message its listener failed once coming back from the
retry topic with ``ReconsumeTimes`` 1 and the same content.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.lab.remoting_checks import assert_same_message, body_of, create_topics
from tests.support.go_client import GoClient
from tests.support.remoting_targets import RemotingTarget

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

TOPIC = "PeersGo"
GROUP = "peers-go-push"
SEND_OK = 0  # the Go client's primitive.SendOK


def test_go_producer_and_push_consumer(remoting_target: RemotingTarget, go_client: GoClient):
    target = remoting_target
    go = go_client.at(target.namesrv)
    create_topics(target, TOPIC)
    singles = [{"topic": TOPIC, "tags": f"go-{i % 2}", "keys": [f"gk-{i}", "gk-all"],
                "properties": {"lang": "Go ✓", "i": str(i)}, "body": f"from Go {i} · grüße"}
               for i in range(4)]
    batch = [{"topic": TOPIC, "tags": "go-batch", "keys": [f"gb-{i}"], "body": f"Go batch {i}"}
             for i in range(3)]
    sent = go.run("produce", group="peers-go-producer",
                  sends=[*({"message": spec} for spec in singles), {"batch": batch}])
    assert [result["status"] for result in sent] == [SEND_OK] * 5
    assert {result["broker"] for result in sent} == {target.broker_name}

    pulled = {body_of(m).decode(): m
              for m in target.driver.run("pull", topics=[TOPIC])["messages"]}
    assert sorted(pulled) == sorted(spec["body"] for spec in [*singles, *batch])
    for spec, result in zip(singles, sent[:4], strict=True):
        message = pulled[spec["body"]]
        assert_same_message(message, spec)
        assert (message["uniq_key"], message["offset_msg_id"]) == \
            (result["msg_id"], result["offset_msg_id"])
        assert (message["queue_id"], message["queue_offset"]) == \
            (result["queue_id"], result["queue_offset"])
    for spec in batch:
        assert_same_message(pulled[spec["body"]], spec)

    bodies = [spec["body"] for spec in [*singles, *batch]]
    deliveries = go.run("push", group=GROUP, topic=TOPIC, expect=bodies, fail_once=bodies[1:2],
                        max_reconsume_times=3, timeout_ms=120_000)["deliveries"]
    seen = defaultdict(list)
    for delivery in deliveries:
        seen[delivery["body"]].append(delivery)
    assert sorted(seen) == sorted(bodies)
    for spec in [*singles, *batch]:
        attempts = [(d["reconsume_times"], d["outcome"]) for d in seen[spec["body"]]]
        assert attempts == ([(0, "fail"), (1, "ok")] if spec["body"] == bodies[1]
                            else [(0, "ok")]), spec["body"]
        for delivery in seen[spec["body"]]:
            assert delivery["topic"] == TOPIC
            assert delivery["tags"] == spec["tags"]
            assert delivery["keys"] == sorted(spec["keys"])
            assert {k: delivery["properties"][k] for k in spec.get("properties", {})} == \
                spec.get("properties", {})
