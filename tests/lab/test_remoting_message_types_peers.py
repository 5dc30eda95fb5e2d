"""RocketMQ 5's other message types with the official remoting clients, against a target
(Apache RocketMQ or ``postbox broker``, ``remoting_target``): the same scenario and assertions on
both.

- The Go client v2's ``TransactionProducer``: local transactions that commit, roll back, or
  answer "unknown" and are settled by the broker's check-back (CHECK_TRANSACTION_STATE answered
  by ``CheckLocalTransaction``); a pull sees exactly the committed ones, each once.
- Timers to a moment: the Java producer's ``Message.setDeliverTimeMs`` and the Go producer with
  the ``TIMER_DELIVER_MS`` property (the Go client v2 has no setter; its users set the
  property): nothing is in the topic before the moment, and each message is stored there at its
  moment (never earlier than the timer precision allows, 1 s: Apache's ``timerPrecisionMs``;
  Postbox keeps the exact millisecond; the lateness is printed), its ``TIMER_DELIVER_MS`` kept.
- The Go client's orderly push consumer (``WithConsumerOrder``, queues locked on the broker) over
  messages sent with an order key (sharding key, hash queue selector): each key's messages in
  send order, a failing message redelivered before its successors.

The figures (timer lateness) are printed.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from tests.lab.remoting_checks import body_of, create_topics
from tests.support.go_client import GoClient
from tests.support.remoting_targets import RemotingTarget

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

TX_TOPIC, TIMER_TOPIC, ORDERED_TOPIC = "PeersGoTx", "PeersTimers", "PeersGoOrdered"
LINGER_MS = {"apache": 45_000, "postbox": 15_000}  # Apache checks every 30 s, Postbox at 6 s
PRECISION_MS = 1000  # Apache's timerPrecisionMs
LATE_SLACK_MS = 15_000
"""How much later than its moment plus the precision a timer may be stored: the figures are
printed, not compared tightly (the machine is shared and loaded; the timer benchmark measures
lateness). Measured: Postbox 1 ms on a quiet machine, 10.2-10.5 s at load average 42; Apache
1.1 s, and 3.8-4.1 s right after the lab's start. Never earlier than the moment less the
precision: that is asserted strictly."""
SEND_OK = 0  # the Go client's primitive.SendOK


def test_go_transaction_producer_commits_rolls_back_and_answers_checks(
        remoting_target: RemotingTarget, go_client: GoClient):
    target = remoting_target
    create_topics(target, TX_TOPIC)
    cases = [("commit", ""), ("rollback", ""), ("unknown", "commit"), ("unknown", "rollback")]
    messages = [{"topic": TX_TOPIC, "tags": "tx", "keys": [f"gtk-{i}"],
                 "properties": {"n": str(i)}, "body": f"go tx {outcome} {check}".strip(),
                 "outcome": outcome, "check": check}
                for i, (outcome, check) in enumerate(cases)]
    sent = go_client.at(target.namesrv).run("transaction", group="peers-go-tx",
                                            messages=messages,
                                            linger_ms=LINGER_MS[target.name])
    assert [result["local_state"] for result in sent] == [
        "commit", "rollback", "unknown", "unknown"]
    assert {result["status"] for result in sent} == {SEND_OK}
    pulled = target.driver.run("pull", topics=[TX_TOPIC])["messages"]
    assert sorted(body_of(m) for m in pulled) == [b"go tx commit", b"go tx unknown commit"]
    for message in pulled:
        assert message["tags"] == "tx" and message["properties"]["PGROUP"] == "peers-go-tx"
        assert message["uniq_key"] in {result["msg_id"] for result in sent}


def test_java_and_go_timers_to_a_moment(remoting_target: RemotingTarget, go_client: GoClient):
    target = remoting_target
    create_topics(target, TIMER_TOPIC)
    moment_ms = int(time.time() * 1000) + 10_000
    java = {"topic": TIMER_TOPIC, "body": "java timer", "deliver_time_ms": moment_ms}
    target.driver.run("produce", sends=[{"message": java}])
    go = {"topic": TIMER_TOPIC, "body": "go timer",
          "properties": {"TIMER_DELIVER_MS": str(moment_ms + 1000)}}
    [sent] = go_client.at(target.namesrv).run("produce", group="peers-go-timer",
                                              sends=[{"message": go}])
    assert sent["status"] == SEND_OK
    moments = {"java timer": moment_ms, "go timer": moment_ms + 1000}
    early = target.driver.run("pull", topics=[TIMER_TOPIC])["messages"]
    assert early == [] or int(time.time() * 1000) >= moment_ms - PRECISION_MS, early

    deadline = time.monotonic() + 60
    while True:
        pulled = target.driver.run("pull", topics=[TIMER_TOPIC])["messages"]
        if len(pulled) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    stored = {body_of(m).decode(): m for m in pulled}
    assert sorted(stored) == sorted(moments)
    lateness = {body: m["store_timestamp"] - moments[body] for body, m in stored.items()}
    timer_properties = {body: {name: value for name, value in m["properties"].items()
                               if name.startswith("TIMER_")} for body, m in stored.items()}
    print(f"{target.name}: timers stored {lateness} ms after their moments; {timer_properties}")
    for body, message in stored.items():
        assert -PRECISION_MS <= lateness[body] <= PRECISION_MS + LATE_SLACK_MS, \
            (body, lateness)
        assert message["properties"]["TIMER_DELIVER_MS"] == str(moments[body])


def test_go_orderly_consumer_keeps_each_order_key_in_order(remoting_target: RemotingTarget,
                                                          go_client: GoClient):
    target = remoting_target
    go = go_client.at(target.namesrv)
    create_topics(target, ORDERED_TOPIC)
    specs = [{"topic": ORDERED_TOPIC, "keys": [f"go-o-{i}"], "body": f"{'ABC'[i % 3]}-{i // 3}"}
             for i in range(12)]
    sent = go.run("produce", group="peers-go-ordered-producer",
                  sends=[{"message": spec, "order_key": spec["body"][0]} for spec in specs])
    queue_of = defaultdict(set)
    for spec, result in zip(specs, sent, strict=True):
        queue_of[spec["body"][0]].add(result["queue_id"])
    assert all(len(queues) == 1 for queues in queue_of.values()), queue_of
    bodies = [spec["body"] for spec in specs]
    failing = "B-1"
    deliveries = go.run("push", group="peers-go-orderly", topic=ORDERED_TOPIC, expect=bodies,
                        fail_once=[failing], max_reconsume_times=5, orderly=True,
                        timeout_ms=120_000)["deliveries"]
    for order_key in "ABC":
        seen = [(d["body"], d["outcome"]) for d in deliveries if d["body"][0] == order_key]
        expected = [(body, "ok") for body in bodies if body[0] == order_key]
        if order_key == failing[0]:
            index = expected.index((failing, "ok"))
            expected.insert(index, (failing, "fail"))  # retried before its successors
        assert seen == expected, (order_key, seen)
    by_queue = defaultdict(list)
    for delivery in deliveries:
        if delivery["outcome"] == "ok":
            by_queue[delivery["queue_id"]].append(delivery["queue_offset"])
    for queue_id, offsets in by_queue.items():
        assert offsets == sorted(offsets), (queue_id, offsets)
