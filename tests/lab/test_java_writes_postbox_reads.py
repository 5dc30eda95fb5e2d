"""Java writes, Postbox reads: a store written by Apache RocketMQ 5.3.3 opened by Postbox.

The official clients send a corpus to a live broker: tags, several keys, user properties,
unicode and binary bodies, bodies that cross 1 MiB segment ends, a batch, delay levels, a
RocketMQ 5 timer message, transactional half messages committed and rolled back, messages sent
through the proxy with the gRPC client and received by a pop consumer, and a push consumer that
fails some messages once (``%RETRY%``) and some always (``%DLQ%``), whose group name is long
enough that its retry topic takes the v2 record layout (the broker refuses longer dead-letter
topics). The clients then pull every queue and ask the broker's query services. The broker
stops; Postbox opens a copy of its store folder and must serve every message with the same
fields, bytes, queue offsets and log positions, answer the same queries the same way, read the
consumer offsets, and find the store consistent (``verify_store``).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from postbox.storage_engine import Broker, HAConfig, MessageStore, StoreConfig, verify_store
from postbox.storage_engine.formats.timer_layout import decode_timer_check
from tests.lab.compare import differences, read_queue
from tests.support.rocketmq_lab import copy_store

MAIN = "LabJavaMain"
TX = "LabJavaTx"
GRPC = "LabJavaGrpc"
GROUP = "lab-jw-" + "g" * 115
"""122 characters: its retry topic (129) takes the v2 record layout; its dead-letter topic (127)
is the longest the broker accepts (only %RETRY% topics may pass 127 characters)."""
GRPC_GROUP = "lab-jw-grpc"
LARGE_BODY = bytes(range(256)) * 1600  # 400 KiB, not UTF-8; three of them cross segment ends


def plain_messages() -> list[dict]:
    tags = ["alpha", "beta", "γάμμα"]
    return [{"message": {
        "topic": MAIN, "tags": tags[i % 3],
        "keys": [f"order-{i}", f"ключ-{i % 4}", "shared-key"],
        "properties": {"region": "eu-west", "emoji": "🎉", f"p{i}": "v" * (i + 1)},
        "body": f"message {i} — ünïcödé ✓ 🎉 " + "x" * (i * 37)}} for i in range(12)]


def corpus_sends() -> list[dict]:
    batch = [{"topic": MAIN, "tags": "batch", "keys": [f"batch-{i}"],
              "properties": {"in_batch": str(i)}, "body": f"batch body {i} ✓"} for i in range(5)]
    large = [{"message": {"topic": MAIN, "tags": "large", "keys": [f"large-{i}"],
                          "body_b64": base64.b64encode(LARGE_BODY[i:] + bytes([i])).decode()}}
             for i in range(3)]
    later = [{"message": {"topic": MAIN, "tags": "delayed", "keys": ["delay-1"],
                          "body": "after level 1", "delay_level": 1}},
             {"message": {"topic": MAIN, "tags": "delayed", "keys": ["delay-2"],
                          "body": "after level 2", "delay_level": 2}},
             {"message": {"topic": MAIN, "tags": "timer", "keys": ["timer-3s"],
                          "body": "after 3 s on the timer wheel", "delay_ms": 3000}},
             {"message": {"topic": MAIN, "tags": "flagged", "body": "flag 7", "flag": 7}}]
    return [*plain_messages(), {"batch": batch}, *large, *later]


@dataclass
class JavaCorpus:
    """What the Java side did and saw, and the copy of the stopped broker's store."""

    sent: list
    pulled: dict
    queries: dict
    query_request: dict
    offsets: dict
    deliveries: list
    store_copy: Path
    broker_conf: Path
    store_host: str


def store_queues(store_dir: Path, broker: str) -> list[dict]:
    """Every (topic, queue) the broker has a consume queue for, as driver queue specs."""
    root = store_dir / "consumequeue"
    return [{"topic": topic.name, "broker": broker, "queue_id": int(queue.name)}
            for topic in sorted(root.iterdir()) for queue in sorted(topic.iterdir())]


def queries_for(pulled: list[dict], cluster: str) -> dict:
    main = [m for m in pulled if m["topic"] == MAIN]
    plain = [m for m in main if m["tags"] in ("alpha", "beta", "γάμμα")]
    dead = [m for m in pulled if m["topic"].startswith("%DLQ%")]
    committed = [m for m in pulled if m["topic"] == TX]
    by_time = [{"topic": m["topic"], "broker": "lab-jw", "queue_id": m["queue_id"],
                "timestamp": m["store_timestamp"] + delta}
               for m in plain[:4] for delta in (-1, 0, 1)]
    return {
        "cluster": cluster, "begin": 0, "end": 2 ** 62,
        "by_key": [{"topic": MAIN, "key": key}
                   for key in ("shared-key", "order-3", "ключ-1", "batch-2", "large-0",
                               "delay-2", "timer-3s")]
                  + [{"topic": TX, "key": "tx-commit-0"}, {"topic": TX, "key": "tx-rollback-0"}],
        "by_uniq_key": [{"topic": m["topic"], "key": m["uniq_key"]}
                        for m in (plain[0], plain[5], *committed[:1], *dead[:1])],
        "by_msg_id": [{"topic": m["topic"], "msg_id": m["offset_msg_id"]}
                      for m in (plain[1], main[-1], *dead[:1])],
        "by_time": by_time,
    }


def produce_corpus(lab, broker) -> tuple[list, list]:
    driver = lab.driver
    driver.run("create-topic", broker_addr=broker.address, topics=[
        {"topic": MAIN, "queues": 4, "message_type": "NORMAL"},
        {"topic": TX, "queues": 2, "message_type": "TRANSACTION"},
        {"topic": GRPC, "queues": 2, "message_type": "NORMAL"}])
    routes = driver.run("await-route", topics=[MAIN, TX, GRPC], timeout_ms=60_000)
    assert routes == {topic: [broker.name] for topic in (MAIN, TX, GRPC)}, routes
    driver.run("create-group", broker_addr=broker.address, group=GROUP, retry_max_times=2)
    sent = driver.run("produce", sends=corpus_sends())
    sent += driver.run("transaction", messages=[
        {"topic": TX, "keys": [f"tx-{outcome}-{i}"], "tags": outcome, "outcome": outcome,
         "body": f"transaction {outcome} {i}"}
        for i in range(2) for outcome in ("commit", "rollback")])
    driver.run("grpc-produce", endpoints=lab.proxy_endpoint, topic=GRPC, messages=[
        {"tags": "grpc", "keys": [f"grpc-{i}", "grpc-shared"], "properties": {"via": "gRPC ✓"},
         "body": f"gRPC message {i} ✓"} for i in range(3)])
    received = driver.run("grpc-receive", endpoints=lab.proxy_endpoint, group=GRPC_GROUP,
                          topic=GRPC, expect=3, timeout_ms=60_000)["messages"]
    assert len(received) == 3, received
    return sent, received


def consume_with_failures(lab, broker, sent: list) -> list:
    """The push consumer: plain messages 2 and 3 fail once, 4 and 5 always."""
    plain = [result["msg_id"] for result in sent[:12]]
    main_keys = [result["msg_id"] for result in sent
                 if result["topic"] == MAIN and "," not in result["msg_id"]]
    pushed = lab.driver.run("push", group=GROUP, topic=MAIN, broker=broker.name,
                            expect=main_keys, fail_once=plain[2:4], fail_always=plain[4:6],
                            max_reconsume_times=2, timeout_ms=120_000)
    return pushed["deliveries"]


@pytest.fixture(scope="module")
def java_corpus(live_rocketmq, tmp_path_factory) -> JavaCorpus:
    lab = live_rocketmq
    folder = tmp_path_factory.mktemp("java-writes")
    broker = lab.start_broker(folder / "store", name="lab-jw")
    try:
        sent, _received = produce_corpus(lab, broker)
        deliveries = consume_with_failures(lab, broker, sent)
        offsets = {GROUP: lab.driver.run("consumer-offsets", group=GROUP),
                   GRPC_GROUP: lab.driver.run("consumer-offsets", group=GRPC_GROUP, topic=GRPC)}
        pulled = lab.driver.run("pull", queues=store_queues(broker.store_dir, broker.name))
        query_request = queries_for(pulled["messages"], lab.cluster)
        queries = lab.driver.run("query", **query_request)
    finally:
        exit_code = broker.stop()
    assert exit_code in (0, 143), f"the broker stopped with {exit_code}"
    assert not (broker.store_dir / "abort").exists(), "a clean stop removes store/abort"
    copy = copy_store(broker.store_dir, folder / "copy")
    return JavaCorpus(sent, pulled, queries, query_request, offsets, deliveries, copy,
                      broker.conf_path, broker.address)


def open_copy(corpus: JavaCorpus, tmp_path: Path) -> StoreConfig:
    """The store as Postbox opens it: the broker's own broker.conf (same file sizes)."""
    root = shutil.copytree(corpus.store_copy, tmp_path / "store")
    return StoreConfig.from_broker_conf(corpus.broker_conf, root_dir=root,
                                        store_host=corpus.store_host, ha=HAConfig())


def test_postbox_serves_every_message_java_pulled_with_the_same_fields_and_bytes(
        java_corpus, tmp_path):
    config = open_copy(java_corpus, tmp_path)
    java_messages = java_corpus.pulled["messages"]
    topics = {m["topic"] for m in java_messages}
    assert {MAIN, TX, GRPC, "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
            "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer", f"%RETRY%{GROUP}",
            f"%DLQ%{GROUP}"} <= topics, sorted(topics)
    store = MessageStore.open(config)
    try:
        mismatches, compared = [], 0
        for queue in java_corpus.pulled["queues"]:
            topic, queue_id = queue["topic"], queue["queue_id"]
            ours = {view.queue_offset: view for view in read_queue(store, topic, queue_id)}
            theirs = [m for m in java_messages
                      if m["topic"] == topic and m["queue_id"] == queue_id]
            assert store.min_offset(topic, queue_id) == queue["min_offset"]
            assert store.max_offset(topic, queue_id) >= queue["max_offset"]
            for message in theirs:
                view = ours.get(message["queue_offset"])
                if view is None:
                    mismatches.append(f"{topic}/{queue_id}@{message['queue_offset']}: missing")
                    continue
                mismatches += differences(message, view)
                compared += 1
        assert not mismatches, "\n".join(mismatches[:40])
        assert compared == len(java_messages) >= 50
        assert any(view.is_v2 for view in read_queue(store, f"%RETRY%{GROUP}", 0))
    finally:
        store.close()
    assert verify_store(config.root_dir, config) == []


def test_postbox_answers_key_unique_key_msg_id_and_time_queries_like_the_broker(
        java_corpus, tmp_path):
    config = open_copy(java_corpus, tmp_path)
    asked, answered = java_corpus.query_request, java_corpus.queries
    store = MessageStore.open(config)
    try:
        for ask, java in zip(asked["by_key"], answered["by_key"], strict=True):
            ours = store.query_by_key(ask["topic"], ask["key"])
            assert sorted(v.log_position for v in ours) == sorted(
                m["commit_log_offset"] for m in java), ask
        for ask, java in zip(asked["by_uniq_key"], answered["by_uniq_key"], strict=True):
            ours = store.query_by_unique_key(ask["topic"], ask["key"])
            assert sorted(v.log_position for v in ours) == sorted(
                m["commit_log_offset"] for m in java), ask
        for ask, java in zip(asked["by_msg_id"], answered["by_msg_id"], strict=True):
            assert store.view_message_by_id(ask["msg_id"]).log_position == java[
                "commit_log_offset"], ask
        for ask, java in zip(asked["by_time"], answered["by_time"], strict=True):
            found = store.offset_by_time(ask["topic"], ask["queue_id"], ask["timestamp"])
            assert found == java, ask
    finally:
        store.close()


def test_postbox_reads_the_consumer_offsets_the_broker_reported(java_corpus, tmp_path):
    config = open_copy(java_corpus, tmp_path)
    with Broker.open(config) as broker:
        for group, rows in java_corpus.offsets.items():
            assert rows, f"the broker reported no offsets for {group}"
            for row in rows:
                assert broker.query_offset(group, row["topic"], row["queue_id"]) == row[
                    "consumer_offset"], (group, row)
    assert verify_store(config.root_dir, config) == []


def test_retry_and_dead_letter_deliveries_are_in_the_store_postbox_reads(java_corpus, tmp_path):
    failed = [d for d in java_corpus.deliveries if d["outcome"] == "fail"]
    assert len(failed) == 2 + 2 * 3  # two fail once, two fail on all three deliveries
    config = open_copy(java_corpus, tmp_path)
    store = MessageStore.open(config)
    try:
        dead = read_queue(store, f"%DLQ%{GROUP}", 0)
        always = {d["uniq_key"] for d in failed if d["reconsume_times"] == 2}
        assert {view.unique_key for view in dead} == always
        java_dead = [m for m in java_corpus.pulled["messages"] if m["topic"] == f"%DLQ%{GROUP}"]
        assert [(v.queue_offset, v.reconsume_count) for v in dead] == [
            (m["queue_offset"], m["reconsume_times"]) for m in java_dead]
        assert not any(view.is_v2 for view in dead)
        retried = read_queue(store, f"%RETRY%{GROUP}", 0)
        assert {view.unique_key for view in retried} >= always
        assert all(view.is_v2 for view in retried)
    finally:
        store.close()


ROCKETMQ_5_FILES = ("timerwheel", "config/timermetrics")
"""Written by RocketMQ 5's timer wheel (on by default): Postbox reads the wheel and the timer
log (nothing pending: nothing changes in them) and leaves the metrics alone; only
``config/timercheck`` moves on (the read time), keeping the timer-queue offset Java left."""


def file_digests(root: Path, names) -> dict[str, str]:
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest() for name in names}


def test_what_rocketmq_5_adds_is_tolerated_and_left_as_it_was(java_corpus, tmp_path):
    config = open_copy(java_corpus, tmp_path)
    root = config.root_dir
    timer_log = sorted(str(p.relative_to(root)) for p in (root / "timerlog").iterdir())
    assert timer_log, "the timer message went through the timer log"
    before = file_digests(root, [*ROCKETMQ_5_FILES, *timer_log])
    check = decode_timer_check((root / "config" / "timercheck").read_bytes())
    with Broker.open(config) as broker:  # rewrites the config files on close
        broker.commit_offset(GROUP, MAIN, 0, 0)
        assert broker.store.max_offset("rmq_sys_wheel_timer", 0) >= 1
        before_timers = sorted(broker.store.topics())
        time.sleep(1.5)  # the timer service ran: what Java's timer delivered is not again
        timed = [view for queue_id in broker.queue_ids(MAIN)
                 for view in read_queue(broker.store, MAIN, queue_id) if view.tags == "timer"]
        assert len(timed) == 1 and "TIMER_DEQUEUE_MS" in timed[0].properties
        assert broker.timer_service.pending_count() == 0
        assert sorted(broker.store.topics()) == before_timers
    assert file_digests(root, [*ROCKETMQ_5_FILES, *timer_log]) == before
    after = decode_timer_check((root / "config" / "timercheck").read_bytes())
    assert after.last_timer_queue_offset == check.last_timer_queue_offset
    assert after.last_read_time_ms >= check.last_read_time_ms
    topics = (root / "config" / "topics.json").read_text()
    assert '"message.type":"TRANSACTION"' in topics  # 5.x topic attributes survive
    groups = (root / "config" / "subscriptionGroup.json").read_text()
    assert '"groupRetryPolicy"' in groups and '"forbiddenTable"' in groups
    assert verify_store(root, config) == []
