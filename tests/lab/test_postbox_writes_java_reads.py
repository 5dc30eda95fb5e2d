"""Postbox writes, Java reads: Apache RocketMQ 5.3.3 started on a store Postbox wrote.

Postbox's ``Broker`` writes a corpus (tags, several keys, user properties, unicode and binary
bodies, bodies that cross 1 MiB segment ends, a batch, delayed messages (one delivered by
Postbox, one still pending when Postbox closes), retries to ``%RETRY%group`` and dead letters to
``%DLQ%group`` through ``send_back``, committed, prepared and rolled-back transaction records,
consumer offsets), then closes. A Java broker starts on a copy of the folder (with the address
Postbox wrote into every record), and the official clients pull every queue (every message with
the same fields, bytes, queue offsets and log positions Postbox reads), query by key, unique key
and msgId, read the consumer offsets, and receive a topic through the proxy with the gRPC
client. The Java broker also delivers the delayed message Postbox left pending.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import pytest

from postbox.storage_engine import Broker, HAConfig, Message, StoreConfig
from tests.lab.compare import differences, postbox_fields, read_queue
from tests.support.polling import wait_until
from tests.support.rocketmq_lab import copy_store
from tests.support.rocketmq_processes import LAB_BROKER_SETTINGS, free_broker_ports

MAIN = "LabPostboxMain"
GRPC = "LabPostboxGrpc"
GROUP = "lab-pw-group"
GRPC_GROUP = "lab-pw-grpc"
LARGE_BODY = bytes(range(256)) * 1600
PROPERTY_CRC = frozenset({"__CRC32#"})
"""Postbox ends every record's properties with RocketMQ 5's ``__CRC32#`` (its default,
``append_property_crc``); a Java broker without ``enabledAppendPropCRC`` hands it to clients as
a property, Postbox's reader does not."""
SYSFLAG_PREPARED, SYSFLAG_COMMIT, SYSFLAG_ROLLBACK = 0x4, 0x8, 0xC


def unique_key(n: int) -> str:
    return f"50424F58{n:024X}"


def corpus() -> list[tuple[Message, int | None]]:
    tags = ["alpha", "beta", "γάμμα"]
    plain = [(Message(MAIN, f"postbox {i} — ünïcödé ✓ 🎉 {'y' * (i * 41)}".encode(),
                      tags=tags[i % 3], keys=[f"pb-order-{i}", f"ключ-{i % 4}", "pb-shared"],
                      properties={"region": "eu-west", "emoji": "🎉", f"p{i}": "v" * (i + 1)},
                      unique_key=unique_key(i), flag=i), None) for i in range(12)]
    large = [(Message(MAIN, LARGE_BODY[i:] + bytes([i]), tags="large", keys=[f"pb-large-{i}"],
                      unique_key=unique_key(100 + i)), None) for i in range(3)]
    transactions = [(Message(MAIN, f"transaction {name}".encode(), tags=name,
                             keys=[f"pb-tx-{name}"], unique_key=unique_key(200 + flag),
                             sys_flag=flag), 2)
                    for name, flag in (("prepared", SYSFLAG_PREPARED),
                                       ("commit", SYSFLAG_COMMIT),
                                       ("rollback", SYSFLAG_ROLLBACK))]
    grpc = [(Message(GRPC, f"to the gRPC client {i} ✓".encode(), tags="grpc",
                     keys=[f"pb-grpc-{i}", "pb-grpc-shared"], properties={"via": "Postbox ✓"},
                     unique_key=unique_key(300 + i)), None) for i in range(4)]
    return [*plain, *large, *transactions, *grpc]


def write_corpus(broker: Broker) -> dict:
    """Postbox's side of the corpus; returns what the Java side must find."""
    broker.create_topic(MAIN, 4)
    broker.create_topic(GRPC, 2)
    for message, queue_id in corpus():
        broker.store.put_message(message, queue_id) if queue_id is not None else broker.send(
            message)
    batch = [Message(MAIN, f"batch body {i} ✓".encode(), tags="batch", keys=[f"pb-batch-{i}"],
                     properties={"in_batch": str(i)}, unique_key=unique_key(400 + i))
             for i in range(5)]
    broker.store.put_messages(batch, 1)
    delivered = broker.send(Message(MAIN, b"after level 1", tags="delayed", keys=["pb-delay-1"],
                                    properties={"DELAY": "1"}, unique_key=unique_key(500)))
    broker.store.wait_dispatched()
    pulled = broker.pull(GROUP, MAIN, 0, 0, 4).messages
    assert len(pulled) == 4
    for offset, view in enumerate(pulled):
        broker.send_back(GROUP, view, delay_level=-1 if offset % 2 else 0)
    wait_until(lambda: broker.find_by_unique_key(MAIN, delivered.unique_key),
               what="Postbox's delay service")
    wait_until(lambda: broker.store.max_offset(f"%RETRY%{GROUP}", 0) == 2, what="the retries")
    for queue_id in range(4):
        broker.commit_offset(GROUP, MAIN, queue_id, broker.store.max_offset(MAIN, queue_id) // 2)
    for queue_id in range(2):
        broker.commit_offset(GRPC_GROUP, GRPC, queue_id, 0)
    pending = broker.send(Message(MAIN, b"left for Java to deliver", tags="delayed",
                                  keys=["pb-delay-8"], properties={"DELAY": "8"},
                                  unique_key=unique_key(501)))
    broker.store.wait_dispatched()
    return {"pending": pending.unique_key}


@dataclass
class PostboxCorpus:
    written: dict
    fields: dict
    queries: dict
    offsets: dict
    java_pulled: dict
    java_queries: dict
    java_query_request: dict
    java_offsets: list
    grpc_received: list
    topics: dict


def postbox_side(root: Path, store_host: str) -> tuple[StoreConfig, dict]:
    config = StoreConfig.from_broker_conf({**LAB_BROKER_SETTINGS, "storePathRootDir": str(root)},
                                          store_host=store_host, ha=HAConfig())
    with Broker.open(config) as broker:
        written = write_corpus(broker)
        store = broker.store
        fields = {(view.topic, view.queue_id, view.queue_offset): postbox_fields(view)
                  for topic, queue_ids in store.topics().items() for queue_id in queue_ids
                  for view in read_queue(store, topic, queue_id)}
        queries = {key: sorted(v.log_position for v in store.query_by_key(MAIN, key))
                   for key in ("pb-shared", "pb-order-3", "ключ-1", "pb-batch-2", "pb-large-0",
                               "pb-tx-commit", "pb-tx-prepared", "pb-tx-rollback", "pb-delay-1")}
        offsets = {(MAIN, q): broker.query_offset(GROUP, MAIN, q) for q in range(4)}
        topics = store.topics()
    return config, {"written": written, "fields": fields, "queries": queries,
                    "offsets": offsets, "topics": topics}


def java_side(lab, store: Path, ports: tuple[int, int], ours: dict) -> dict:
    broker = lab.start_broker(store, name="lab-pw", ports=ports)
    try:
        driver = lab.driver
        routes = driver.run("await-route", topics=[MAIN, GRPC], timeout_ms=60_000)
        assert routes == {MAIN: [broker.name], GRPC: [broker.name]}
        received = driver.run("grpc-receive", endpoints=lab.proxy_endpoint, group=GRPC_GROUP,
                              topic=GRPC, expect=4, timeout_ms=60_000)["messages"]
        java_offsets = driver.run("consumer-offsets", group=GROUP, topic=MAIN)
        queues = [{"topic": topic, "broker": broker.name, "queue_id": queue_id}
                  for topic, queue_ids in sorted(ours["topics"].items()) for queue_id in queue_ids]
        pulled = driver.run("pull", queues=queues)
        main = sorted((m for m in pulled["messages"] if m["topic"] == MAIN),
                      key=lambda m: m["commit_log_offset"])
        request = {
            "cluster": lab.cluster, "begin": 0, "end": 2 ** 62,
            "by_key": [{"topic": MAIN, "key": key} for key in ours["queries"]],
            "by_uniq_key": [{"topic": MAIN, "key": unique_key(n)} for n in (0, 5, 101, 402)],
            "by_msg_id": [{"topic": MAIN, "msg_id": m["offset_msg_id"]} for m in main[::7]],
        }
        queries = driver.run("query", **request)
    finally:
        exit_code = broker.stop()
    assert exit_code in (0, 143), f"the Java broker stopped with {exit_code}"
    return {"java_pulled": pulled, "java_queries": queries, "java_query_request": request,
            "java_offsets": java_offsets, "grpc_received": received}


@pytest.fixture(scope="module")
def postbox_corpus(live_rocketmq, tmp_path_factory) -> PostboxCorpus:
    folder = tmp_path_factory.mktemp("postbox-writes")
    ports = free_broker_ports()
    _config, ours = postbox_side(folder / "postbox", f"127.0.0.1:{ports[0]}")
    copy = copy_store(folder / "postbox", folder / "java")
    theirs = java_side(live_rocketmq, copy, ports, ours)
    return PostboxCorpus(**ours, **theirs)


def test_java_pulls_every_message_postbox_wrote_with_the_same_fields_and_bytes(postbox_corpus):
    java = postbox_corpus.java_pulled["messages"]
    seen = {(m["topic"], m["queue_id"], m["queue_offset"]): m for m in java}
    missing = sorted(set(postbox_corpus.fields) - set(seen))
    assert not missing, f"Java did not return {missing[:10]}"
    mismatches = []
    for key, ours in postbox_corpus.fields.items():
        mismatches += differences(seen[key], ours, ignore=PROPERTY_CRC)
    assert not mismatches, "\n".join(mismatches[:40])
    assert len(postbox_corpus.fields) >= 30
    assert all("__CRC32#" in seen[key]["properties"] for key in postbox_corpus.fields)


def test_transaction_types_are_dispatched_alike(postbox_corpus):
    tags = [m["tags"] for m in postbox_corpus.java_pulled["messages"] if m["topic"] == MAIN]
    assert tags.count("commit") == 1
    assert "prepared" not in tags and "rollback" not in tags


def test_the_java_broker_delivers_the_delay_postbox_left_pending(postbox_corpus):
    pending = postbox_corpus.written["pending"]
    delivered = [m for m in postbox_corpus.java_pulled["messages"]
                 if m["topic"] == MAIN and m["uniq_key"] == pending]
    assert len(delivered) == 1, "the Java broker did not deliver Postbox's pending delay"
    assert delivered[0]["properties"]["REAL_TOPIC"] == MAIN


def test_java_answers_queries_on_postbox_records_like_postbox(postbox_corpus):
    asked, answered = postbox_corpus.java_query_request, postbox_corpus.java_queries
    for ask, java in zip(asked["by_key"], answered["by_key"], strict=True):
        assert sorted(m["commit_log_offset"] for m in java) == postbox_corpus.queries[
            ask["key"]], ask
    by_position = {f["commit_log_offset"]: f for f in postbox_corpus.fields.values()}
    for ask, java in zip(asked["by_uniq_key"], answered["by_uniq_key"], strict=True):
        assert [m["uniq_key"] for m in java] == [ask["key"]], ask
        assert java[0]["commit_log_offset"] in by_position
    for ask, java in zip(asked["by_msg_id"], answered["by_msg_id"], strict=True):
        assert by_position[java["commit_log_offset"]]["offset_msg_id"] == ask["msg_id"]


def test_java_reads_postbox_consumer_offsets(postbox_corpus):
    java = {(row["topic"], row["queue_id"]): row["consumer_offset"]
            for row in postbox_corpus.java_offsets}
    assert java == postbox_corpus.offsets


def test_the_grpc_client_receives_postbox_messages_through_the_proxy(postbox_corpus):
    ours = {f["uniq_key"]: f for f in postbox_corpus.fields.values() if f["topic"] == GRPC}
    received = postbox_corpus.grpc_received
    assert sorted(m["message_id"] for m in received) == sorted(ours)
    for message in received:
        expected = ours[message["message_id"]]
        assert message["body_b64"] == expected["body_b64"]
        assert message["tags"] == expected["tags"]
        assert sorted(message["keys"]) == sorted(expected["keys"].split(" "))
        assert message["properties"]["via"] == "Postbox ✓"
        assert base64.b64decode(message["body_b64"]).decode().startswith("to the gRPC client")
