"""The official remoting peers against a target: the lab's Apache RocketMQ and ``postbox broker``.

Each test runs against both targets (``remoting_target``, ``tests/lab/conftest.py``): the Java
remoting client 5.3.3 (``DefaultMQProducer``, ``DefaultMQPullConsumer``,
``DefaultMQPushConsumer`` concurrent and orderly, ``DefaultLitePullConsumer`` in subscribe and
assign mode, through the lab driver) and ``mqadmin`` (``tests/support/mqadmin.py``). One JVM per
scenario; assertions read what the peers reported: messages round-trip byte for byte with
their tags, keys and user properties; failed messages come back from the retry topic and, past
``maxReconsumeTimes``, land in the dead-letter queue; orderly consumption keeps each queue's
order; committed offsets are what the broker then reports; ``mqadmin`` names the topics,
queues, offsets and messages.
"""

from __future__ import annotations

import base64
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.lab.remoting_checks import (
    QUEUES,
    assert_same_message,
    b64,
    body_of,
    create_topics,
)
from tests.support import mqadmin as read
from tests.support.remoting_targets import RemotingTarget

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

PUSH_TIMEOUT_MS = 120_000
BINARY_BODY = bytes(range(256)) + "grüße ✓ 東京".encode()

# ------------------------------------------------------------ producer, pull consumer, mqadmin


PRODUCED = "PeersProduced"


def producer_corpus() -> tuple[list[dict], list[dict], list[dict]]:
    """(singles, batch, orderly): 6 singles with binary and unicode bodies, tags, two keys each
    and unicode user properties; a batch of 3; 8 orderly messages under two order keys."""
    singles = [{"topic": PRODUCED, "tags": f"tag-{i % 3}", "keys": [f"pk-{i}", "pk-shared"],
                "properties": {"tenant": f"tënant-{i}", "n": str(i)},
                "body_b64": b64(BINARY_BODY + bytes([i]))} for i in range(6)]
    batch = [{"topic": PRODUCED, "tags": "batch", "keys": [f"bk-{i}"], "body": f"batch ✓ {i}"}
             for i in range(3)]
    orderly = [{"topic": PRODUCED, "tags": "order", "keys": [f"ok-{i}"],
                "body": f"{'AB'[i % 2]}-{i // 2}"} for i in range(8)]
    return singles, batch, orderly


def test_java_producer_round_trips_and_mqadmin_reads_it(remoting_target: RemotingTarget):
    target = remoting_target
    create_topics(target, PRODUCED)
    singles, batch, orderly = producer_corpus()
    sent = target.driver.run("produce", sends=[
        *({"message": spec} for spec in singles), {"batch": batch},
        *({"message": spec, "order_key": spec["body"][0]} for spec in orderly)])
    assert {result["status"] for result in sent} == {"SEND_OK"}
    single_sent, batch_sent, orderly_sent = sent[:6], sent[6], sent[7:]

    pulled = target.driver.run("pull", topics=[PRODUCED])
    by_body = {body_of(m): m for m in pulled["messages"]}
    assert len(pulled["messages"]) == len(by_body) == 6 + 3 + 8
    for spec, result in zip(singles, single_sent, strict=True):
        message = by_body[base64.b64decode(spec["body_b64"])]
        assert_same_message(message, spec)
        assert (message["uniq_key"], message["offset_msg_id"]) == \
            (result["msg_id"], result["offset_msg_id"])
        assert (message["queue_id"], message["queue_offset"]) == \
            (result["queue_id"], result["queue_offset"])
        assert message["store_host"] == target.broker_addr, message["store_host"]
    # a batch's entries: content as sent, in one queue from the offset its send returned (their
    # UNIQ_KEY is not compared: Apache's broker appends the batch's own UNIQ_KEY to each entry)
    entries = [by_body[spec["body"].encode()] for spec in batch]
    for spec, entry in zip(batch, entries, strict=True):
        assert_same_message(entry, spec)
    assert [(e["queue_id"], e["queue_offset"]) for e in entries] == \
        [(batch_sent["queue_id"], batch_sent["queue_offset"] + i) for i in range(3)]
    queue_of = {key: [r["queue_id"] for r, s in zip(orderly_sent, orderly, strict=True)
                      if s["body"][0] == key] for key in "AB"}
    for order_key, queues in queue_of.items():
        assert len(set(queues)) == 1, f"order key {order_key} spread over queues {queues}"
        in_queue = sorted((m for m in pulled["messages"]
                           if m["queue_id"] == queues[0] and m["tags"] == "order"
                           and body_of(m).decode()[0] == order_key),
                          key=lambda m: m["queue_offset"])
        assert [body_of(m).decode() for m in in_queue] == \
            [s["body"] for s in orderly if s["body"][0] == order_key]
    per_queue = {q["queue_id"]: q["max_offset"] - q["min_offset"] for q in pulled["queues"]}
    check_mqadmin_views(target, singles, single_sent, per_queue)


def check_mqadmin_views(target: RemotingTarget, singles: list[dict], sent: list[dict],
                        per_queue: dict[int, int]) -> None:
    first = sent[0]
    outputs = target.mqadmin.run(
        ["topicList"], ["topicRoute", "-t", PRODUCED], ["topicStatus", "-t", PRODUCED],
        ["clusterList"], ["brokerStatus", "-b", target.broker_addr],
        ["queryMsgById", "-t", PRODUCED, "-i", first["offset_msg_id"]],
        ["queryMsgByKey", "-t", PRODUCED, "-k", "pk-shared"],
        ["queryMsgByUniqueKey", "-t", PRODUCED, "-i", sent[1]["msg_id"]])
    topics, route, status, cluster, broker, by_id, by_key, by_uniq = (o.out for o in outputs)

    assert PRODUCED in read.topic_list(topics)
    route = read.topic_route(route)
    assert [(b["brokerName"], b["brokerAddrs"]) for b in route["brokerDatas"]] == \
        [(target.broker_name, {"0": target.broker_addr})]
    assert [(q["readQueueNums"], q["writeQueueNums"]) for q in route["queueDatas"]] == \
        [(QUEUES, QUEUES)]
    rows = read.topic_status(status)
    assert {r["queue_id"]: r["max_offset"] - r["min_offset"] for r in rows} == per_queue
    assert {r["broker"] for r in rows} == {target.broker_name}
    brokers = read.cluster_list(cluster)
    assert [(b["broker"], b["broker_id"], b["address"]) for b in brokers] == \
        [(target.broker_name, 0, target.broker_addr)]
    assert "brokerVersionDesc" in read.broker_status(broker)

    details = read.message_details(by_id)
    assert (details["Topic"], details["Tags"], details["Keys"]) == \
        (PRODUCED, "[tag-0]", "[pk-0 pk-shared]")
    assert (int(details["Queue ID"]), int(details["Queue Offset"])) == \
        (first["queue_id"], first["queue_offset"])
    assert details["Store Host"] == target.broker_addr
    assert read.properties(details["Properties"])["tenant"] == "tënant-0"
    # mqadmin writes the body it received to a file and prints its path
    assert Path(details["Message Body Path"]).read_bytes() == \
        base64.b64decode(singles[0]["body_b64"])
    assert {row["msg_id"] for row in read.key_query(by_key)} == {r["msg_id"] for r in sent}
    details = read.message_details(by_uniq)
    assert (details["Topic"], details["Keys"], int(details["Queue Offset"])) == \
        (PRODUCED, "[pk-1 pk-shared]", sent[1]["queue_offset"])


# ------------------------------------------------------------ push consumers


PUSHED = "PeersPushed"
PUSH_GROUP = "peers-push"
ORDERED = "PeersOrdered"
ORDER_GROUP = "peers-orderly"


def test_java_push_consumers_retry_dead_letter_and_keep_order(remoting_target: RemotingTarget):
    target = remoting_target
    create_topics(target, PUSHED, ORDERED)
    specs = [{"topic": PUSHED, "tags": f"t{i % 2}", "keys": [f"push-{i}"],
              "properties": {"i": str(i), "note": "über"}, "body": f"push body {i} ✓"}
             for i in range(6)]
    delayed = {"topic": PUSHED, "tags": "later", "body": "delayed ✓", "delay_level": 2}
    orderly = [{"topic": ORDERED, "keys": [f"o-{i}"], "body": f"{'ABC'[i % 3]}-{i // 3}"}
               for i in range(12)]
    sent = target.driver.run("produce", sends=[
        *({"message": spec} for spec in [*specs, delayed]),
        *({"message": spec, "order_key": spec["body"][0]} for spec in orderly)])
    keys = [result["msg_id"] for result in sent[:7]]
    fail_once, fail_always = keys[1:3], keys[3:4]
    pushed = target.driver.run(
        "push", group=PUSH_GROUP, topic=PUSHED, broker=target.broker_name, expect=keys,
        fail_once=fail_once, fail_always=fail_always, max_reconsume_times=2,
        timeout_ms=PUSH_TIMEOUT_MS)["deliveries"]
    seen = defaultdict(list)
    for delivery in pushed:
        seen[delivery["uniq_key"]].append(delivery)
    for key, spec in zip(keys, [*specs, delayed], strict=True):
        deliveries = seen[key]
        for delivery in deliveries:
            assert delivery["topic"] == PUSHED
            assert_same_message(delivery, spec)
        attempts = [(d["reconsume_times"], d["outcome"]) for d in deliveries]
        if key in fail_once:
            assert attempts == [(0, "fail"), (1, "ok")], key
        elif key in fail_always:
            assert attempts == [(0, "fail"), (1, "fail"), (2, "fail")], key
        else:
            assert attempts == [(0, "ok")], key

    dead = target.driver.run("pull", queues=[
        {"topic": f"%DLQ%{PUSH_GROUP}", "broker": target.broker_name, "queue_id": 0}])
    assert [m["uniq_key"] for m in dead["messages"]] == fail_always
    assert_same_message(dead["messages"][0], specs[3])

    order_keys = [result["msg_id"] for result in sent[7:]]
    ordered = target.driver.run(
        "push", group=ORDER_GROUP, topic=ORDERED, broker=target.broker_name, orderly=True,
        expect=order_keys, fail_once=[order_keys[4]], max_reconsume_times=5,
        timeout_ms=PUSH_TIMEOUT_MS)["deliveries"]
    check_orderly(ordered, orderly, order_keys[4])
    check_progress(target, {PUSH_GROUP: PUSHED, ORDER_GROUP: ORDERED})


def check_orderly(deliveries: list[dict], specs: list[dict], failing: str) -> None:
    """Each queue consumed in offset order, each order key in send order, the failing message
    redelivered before anything after it in its queue."""
    by_queue = defaultdict(list)
    for delivery in deliveries:
        by_queue[delivery["queue_id"]].append(delivery)
    for queue_id, seen in by_queue.items():
        offsets = [d["queue_offset"] for d in seen if d["outcome"] == "ok"]
        assert offsets == list(range(len(offsets))), f"queue {queue_id}: {offsets}"
        failed = [i for i, d in enumerate(seen) if d["outcome"] == "fail"]
        for index in failed:
            assert seen[index]["uniq_key"] == failing
            assert seen[index + 1]["uniq_key"] == failing  # retried before its successors
    for order_key in "ABC":
        bodies = [body_of(d).decode() for d in deliveries
                  if d["outcome"] == "ok" and body_of(d).decode()[0] == order_key]
        assert bodies == [s["body"] for s in specs if s["body"][0] == order_key]
    assert [d["outcome"] for d in deliveries].count("fail") == 1


def check_progress(target: RemotingTarget, groups: dict[str, str]) -> None:
    """``mqadmin consumerProgress``: every queue of each group's topic committed to its end."""
    outputs = target.mqadmin.run(*(["consumerProgress", "-g", group] for group in groups))
    for (group, topic), output in zip(groups.items(), outputs, strict=True):
        rows = [r for r in read.consumer_progress(output.out) if r["topic"] == topic]
        assert sorted(r["queue_id"] for r in rows) == list(range(QUEUES)), (group, rows)
        assert [r["consumer_offset"] for r in rows] == [r["broker_offset"] for r in rows], \
            (group, rows)


# ------------------------------------------------------------ lite pull consumer


LITE = "PeersLite"


def test_java_lite_pull_consumer_subscribes_assigns_seeks_and_commits(
        remoting_target: RemotingTarget):
    target = remoting_target
    create_topics(target, LITE)
    sent = target.driver.run("produce", sends=[
        {"message": {"topic": LITE, "keys": [f"lite-{i}"], "body": f"lite {i}"}}
        for i in range(12)])
    counts = Counter(result["queue_id"] for result in sent)
    keys = {result["msg_id"] for result in sent}

    subscribed = target.driver.run("lite-pull", group="peers-lite-sub", topic=LITE,
                                   mode="subscribe", expect=12, timeout_ms=60_000)
    assert {m["uniq_key"] for m in subscribed["messages"]} == keys
    assert {q["queue_id"]: q["committed"] for q in subscribed["queues"]} == \
        {q: counts[q] for q in range(QUEUES)} | {q: -1 for q in range(QUEUES) if not counts[q]}

    busiest = max(counts, key=counts.get)
    assigned = target.driver.run("lite-pull", group="peers-lite-assign", topic=LITE,
                                 mode="assign", expect=12,
                                 seek=[{"queue_id": busiest, "offset": 1}],
                                 expect_after_seek=counts[busiest] - 1, timeout_ms=60_000)
    assert {m["uniq_key"] for m in assigned["messages"]} == keys
    assert [(m["queue_id"], m["queue_offset"]) for m in assigned["after_seek"]] == \
        [(busiest, offset) for offset in range(1, counts[busiest])]
    assert {q["queue_id"]: q["committed"] for q in assigned["queues"] if counts[q["queue_id"]]} \
        == dict(counts)
    output, = target.mqadmin.run(["consumerProgress", "-g", "peers-lite-sub"])
    rows = {r["queue_id"]: (r["broker_offset"], r["consumer_offset"])
            for r in read.consumer_progress(output.out) if r["topic"] == LITE}
    assert {q: rows[q] for q in counts} == {q: (n, n) for q, n in counts.items()}
