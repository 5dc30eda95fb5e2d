"""Replication across implementations: RocketMQ's classic HA stream between Apache RocketMQ and
Postbox, in both directions (docs/replication.md, "Replicating with Apache RocketMQ").

The HA mode is RocketMQ's ``DefaultHAService`` (the 5.x default without controller mode, the
same framing as 4.x): the slave reports its log end in 8 bytes, the master sends frames with a
12-byte header (position, size) followed by raw commit-log bytes. Both sides use the lab's 1 MiB
commit-log segments (an empty slave starts at the master's last segment), and the corpus is
larger than one segment, so the copy crosses a segment end and its blank end-of-segment record.

- Java SYNC_MASTER (``inSyncReplicas=2``: RocketMQ 5 waits for the slave only then) → Postbox
  slave (``MessageStore`` with ``broker_role=SLAVE``): every send the official client saw
  ``SEND_OK`` is, after ``kill -9`` of the master, in the slave's store at the position its
  offset message id names, with the same fields, and the slave's log bytes equal the master's.
- Postbox SYNC_MASTER (``postbox broker start --role SYNC_MASTER``) → Java slave
  (``brokerRole=SLAVE``, ``brokerId=1``, the master's HA address from the name server, where the
  driver registers the Postbox master: ``start_java_slave``): every send the official RocketMQ 5
  client saw acknowledged is, after ``kill -9`` of the master, in the Java slave's store
  (Postbox opens a copy: the record its message id finds in the Java slave's index, at its
  receipt's queue offset, the Java slave's own consume queues and key index lead to it), and
  the slave's log bytes equal the master's.

The Java slave's metadata synchronisation (topics, offsets, timer checkpoints over the RocketMQ
remoting protocol, which Postbox does not serve yet) fails and is not checked
(docs/replication.md).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from postbox.storage_engine import (
    BrokerRole,
    HAConfig,
    Message,
    MessageStore,
    StoreConfig,
    verify_store,
)
from postbox.storage_engine.broker_conf import parse_properties
from tests.broker_node.grpc_v2.rocketmq_clients import configuration, start_producer
from tests.broker_node.grpc_v2.rocketmq_clients import message as client_message
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until
from tests.support.rocketmq_lab import DriverError, copy_store

JAVA_TOPIC = "ReplFromJava"
POSTBOX_TOPIC = "ReplFromPostbox"
QUEUE_COUNT = 4
SINGLE_SENDS = 420
BATCHES = 6
BATCH_SIZE = 8
BODY_PAD_BYTES = 2_400  # x (420 + 48) messages: about 1.2 MiB, more than one 1 MiB segment
CONNECT_TIMEOUT_S = 60
ACK_PROBE_TIMEOUT_S = 120
REGISTER_TIMEOUT_S = 240
SLAVE_REGISTER_PERIOD_MS = 10_000  # RocketMQ's shortest registerNameServerPeriod
REPL_CLUSTER = "PostboxRepl"
REPL_BROKER = "repl-postbox"

JAVA_SYNC_MASTER = {"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2", "totalReplicas": "2"}
"""A Java 5.x SYNC_MASTER waits for a slave's acknowledgement only when it needs two in-sync
replicas (itself and the slave); with the default ``inSyncReplicas=1`` it answers at once."""


def ha_address(conf_path: Path) -> str:
    """A Java broker's HA listen address from its broker.conf."""
    settings = parse_properties(conf_path.read_text())
    return f"{settings['brokerIP2']}:{settings['haListenPort']}"


def log_bytes(store_dir: Path, start: int, end: int, segment_size_bytes: int) -> bytes:
    """The commit-log bytes ``[start, end)`` read straight from a store's segment files."""
    chunks = []
    position = start
    while position < end:
        base = position - position % segment_size_bytes
        with open(store_dir / "commitlog" / f"{base:020d}", "rb") as segment:
            segment.seek(position - base)
            chunk = segment.read(min(end, base + segment_size_bytes) - position)
        assert chunk, f"{store_dir} has no commit-log bytes at {position}"
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def padded_body(index: int) -> str:
    return f"réplica №{index} ✓ " + "x" * (BODY_PAD_BYTES + index % 97)


# ---- Java master, Postbox slave ------------------------------------------------------------------


def java_corpus() -> list[dict]:
    """The driver's sends: single messages with tags, keys and unicode properties, then
    batches."""
    sends = [{"message": {"topic": JAVA_TOPIC, "tags": f"tag{index % 3}",
                          "keys": [f"jk-{index}", f"shared-{index % 5}"],
                          "properties": {"colour": "grün", "n": str(index)},
                          "body": padded_body(index)}}
             for index in range(SINGLE_SENDS)]
    sends += [{"batch": [{"topic": JAVA_TOPIC, "tags": "batch", "keys": [f"jb-{batch}-{item}"],
                          "body": f"batch {batch} item {item} ✓"}
                         for item in range(BATCH_SIZE)]}
              for batch in range(BATCHES)]
    return sends


def sent_messages(sends: list[dict], results: list[dict]) -> list[tuple[dict, str, str]]:
    """(spec, uniq key, offset msg id) of every message the broker acknowledged with SEND_OK.

    A batch's result lists its messages' ids, comma-separated, in order. Its unique keys are
    not compared (None): the 5.3.3 remoting client reports ids for a batch that are not the
    ``UNIQ_KEY`` values the broker stored (seen on the Java master's own records too; the
    byte comparison of the two logs covers what the slave holds)."""
    acknowledged = []
    for send, result in zip(sends, results, strict=True):
        if result["status"] != "SEND_OK":
            continue
        specs = send["batch"] if "batch" in send else [send["message"]]
        uniq_keys = result["msg_id"].split(",")
        offset_ids = result["offset_msg_id"].split(",")
        assert len(uniq_keys) == len(offset_ids) == len(specs), result
        if "batch" in send:
            uniq_keys = [None] * len(specs)
        acknowledged += zip(specs, uniq_keys, offset_ids, strict=True)
    return acknowledged


def wait_for_route(driver, topic: str, broker_name: str) -> None:
    """Until the name server routes ``topic`` to ``broker_name`` alone: a producer that finds no
    route yet falls back to auto-creation, which would spread sends over every broker of the
    lab (the session's broker among them)."""
    def routed():
        try:
            queues = driver.run("pull", topics=[topic])["queues"]
        except DriverError:
            return False
        return bool(queues) and {queue["broker"] for queue in queues} == {broker_name}

    wait_until(routed, CONNECT_TIMEOUT_S, f"a route for {topic} to {broker_name} only",
               interval_s=1)


def stored_on(offset_msg_id: str, broker_address: str) -> bool:
    """Whether an offset message id (IPv4 + port + position, hex) names ``broker_address``."""
    host, port = broker_address.rsplit(":", 1)
    ip = "".join(f"{int(part):02X}" for part in host.split("."))
    return offset_msg_id.upper().startswith(f"{ip}{int(port):08X}")


def probe_spec(topic: str = JAVA_TOPIC) -> dict:
    return {"topic": topic, "tags": "probe", "body": "probe"}


def first_acknowledged_send(driver, topic: str) -> dict:
    """Sends a probe until the Java SYNC_MASTER answers SEND_OK: it refuses or times out
    (``IN_SYNC_REPLICAS_NOT_ENOUGH``, ``FLUSH_SLAVE_TIMEOUT``) until the slave reported."""
    probe = {"message": probe_spec(topic)}
    failures = []

    def acknowledged():
        try:
            (result,) = driver.run("produce", sends=[probe])
        except Exception as error:  # the broker refuses before the slave is in
            failures.append(str(error).splitlines()[0])
            return None
        return result if result["status"] == "SEND_OK" else failures.append(result["status"])

    try:
        return wait_until(acknowledged, ACK_PROBE_TIMEOUT_S, "a SEND_OK from the Java master",
                          interval_s=1)
    except AssertionError as error:
        raise AssertionError(f"{error}; answers: {failures[-3:]}") from None


def test_postbox_slave_holds_every_message_a_java_sync_master_acknowledged_after_kill_9(
        live_rocketmq, rocketmq_brokers, tmp_path):
    driver = live_rocketmq.driver
    master = rocketmq_brokers.start(tmp_path / "java-master", name="repl-java-master",
                                    extra=JAVA_SYNC_MASTER)
    config = StoreConfig.from_broker_conf(
        master.conf_path, root_dir=tmp_path / "postbox-slave", broker_role=BrokerRole.SLAVE,
        ha=HAConfig(master_address=ha_address(master.conf_path)))
    slave = MessageStore.open(config)
    try:
        wait_until(lambda: slave.ha_status()["connected"], CONNECT_TIMEOUT_S,
                   "the Postbox slave connected to the Java master")
        driver.run("create-topic", broker_addr=master.address, topic=JAVA_TOPIC,
                   queues=QUEUE_COUNT, message_type="NORMAL")
        wait_for_route(driver, JAVA_TOPIC, master.name)
        probe = first_acknowledged_send(driver, JAVA_TOPIC)
        sends = java_corpus()
        started = time.monotonic()
        results = driver.run("produce", sends=sends)
        send_s = time.monotonic() - started
        master.kill()  # SIGKILL: no clean close, nothing more sent
        slave_status = slave.ha_status()
    finally:
        slave.close()
    acknowledged = sent_messages(sends, results)
    assert {result["status"] for result in results} == {"SEND_OK"}, "a send was not replicated"
    assert [m for m in acknowledged if not stored_on(m[2], master.address)] == []
    assert stored_on(probe["offset_msg_id"], master.address), probe

    reopened = config.replace(ha=HAConfig())  # read the copy; no master to follow
    assert verify_store(config.root_dir, reopened) == []
    store = MessageStore.open(reopened)
    try:
        mismatches = []
        for spec, uniq_key, offset_msg_id in acknowledged:
            mismatches += java_message_mismatches(store, spec, uniq_key, offset_msg_id)
        mismatches += java_message_mismatches(store, probe_spec(), probe["msg_id"],
                                              probe["offset_msg_id"])
        end = store.commit_log.max_position
    finally:
        store.close()
    assert mismatches == []
    segment = config.commit_log.segment_size_bytes
    assert end > segment, "the corpus was meant to cross a segment end"
    assert log_bytes(config.root_dir, 0, end, segment) == log_bytes(master.store_dir, 0, end,
                                                                     segment)
    print(f"java->postbox: {len(acknowledged) + 1} acknowledged messages checked, {end} log bytes "
          f"equal; corpus sent in {send_s:.1f} s; slave {slave_status}")


def java_message_mismatches(store: MessageStore, spec: dict, uniq_key: str,
                            offset_msg_id: str) -> list[str]:
    """Where the Postbox slave's copy of one acknowledged message differs from what was sent."""
    view = store.view_message_by_id(offset_msg_id)
    expected = {"topic": spec["topic"], "body": spec["body"].encode(),
                "tags": spec.get("tags"), "keys": " ".join(spec.get("keys", [])) or None,
                "unique_key": uniq_key or view.unique_key, **{name: str(value) for name, value
                                           in spec.get("properties", {}).items()}}
    found = {"topic": view.topic, "body": view.body, "tags": view.tags,
             "keys": view.properties.get("KEYS"), "unique_key": view.unique_key,
             **{name: view.properties.get(name) for name in spec.get("properties", {})}}
    mismatches = [f"{offset_msg_id} {name}: sent {expected[name]!r}, slave {found[name]!r}"
                  for name in expected if expected[name] != found[name]]
    (queued,) = store.get_message("repl-check", view.topic, view.queue_id, view.queue_offset,
                                  1).messages
    if queued.log_position != view.log_position:
        mismatches.append(f"{offset_msg_id}: queue offset {view.queue_offset} leads to "
                          f"position {queued.log_position}, not {view.log_position}")
    return mismatches


# ---- Postbox master, Java slave ------------------------------------------------------------------


def postbox_corpus() -> list[Message]:
    return [Message(POSTBOX_TOPIC, padded_body(index).encode(), tags=f"tag{index % 3}",
                    keys=[f"pk-{index}", f"shared-{index % 5}"],
                    properties={"colour": "grün", "n": str(index)})
            for index in range(SINGLE_SENDS + BATCHES * BATCH_SIZE)]


@pytest.fixture
def postbox_processes():
    started: list[BrokerProcess] = []
    yield started
    for process in started:
        process.kill()


def start_java_slave(lab, brokers, master: BrokerProcess, store_dir: Path):
    """A Java slave of the Postbox master. RocketMQ 5.3.3 applies broker.conf's
    ``haMasterAddress`` before its HA client exists (so it is lost) and then takes the master's
    HA address only from the name server's answer to its registration; Postbox does not
    register with a name server, so the driver registers it (broker id 0, its HA address) until
    the slave has been listed for longer than its registration period (the slave registers
    every ``SLAVE_REGISTER_PERIOD_MS``, so one registration meets the master's whichever JVM
    came up first)."""
    with ThreadPoolExecutor(1) as pool:
        registration = pool.submit(
            lab.driver.run, "register-master", cluster=REPL_CLUSTER, broker_name=REPL_BROKER,
            broker_addr=master.address, ha_addr=master.ha_address, wait_for_broker_id=1,
            hold_after_seen_ms=SLAVE_REGISTER_PERIOD_MS + 3_000,
            timeout_ms=REGISTER_TIMEOUT_S * 1000)
        slave = brokers.start(store_dir, name="repl-java-slave", extra={
            "brokerClusterName": REPL_CLUSTER, "brokerName": REPL_BROKER,
            "brokerRole": "SLAVE", "brokerId": "1",
            "registerNameServerPeriod": str(SLAVE_REGISTER_PERIOD_MS)})
        seen = registration.result(timeout=REGISTER_TIMEOUT_S + 60)
    assert seen["seen"], f"the Java slave never registered beside the Postbox master: {seen}"
    return slave


def test_java_slave_holds_every_message_a_postbox_sync_master_acknowledged_after_kill_9(
        live_rocketmq, rocketmq_brokers, postbox_processes, tmp_path):
    master_store = tmp_path / "postbox-master"
    master = BrokerProcess(master_store, broker_conf=write_broker_conf(tmp_path), extra=(
        "--role", "SYNC_MASTER", "--ha-listen", "127.0.0.1:0", "--slave-timeout-ms", "5000"))
    postbox_processes.append(master.start())
    slave = start_java_slave(live_rocketmq, rocketmq_brokers, master, tmp_path / "java-slave")
    messages = postbox_corpus()
    clients: list = []
    try:
        producer = start_producer(clients, configuration(master.address), POSTBOX_TOPIC,
                                  "probe")
        wait_until(lambda: acknowledged(producer, client_message("probe", b"probe")),
                   ACK_PROBE_TIMEOUT_S, "an acknowledged send from the Postbox master",
                   interval_s=0.5)
        started = time.monotonic()
        receipts = [producer.send(as_client_message(message)) for message in messages]
        send_s = time.monotonic() - started
    finally:
        for client in clients:
            client.shutdown()
    master.kill()  # SIGKILL: no clean close, nothing more sent

    slave.stop()  # SIGTERM: the Java slave flushes its queues and index, removes store/abort
    assert not (slave.store_dir / "abort").exists(), "the Java slave did not stop cleanly"
    copy = copy_store(slave.store_dir, tmp_path / "java-slave-copy")
    config = StoreConfig.from_broker_conf(slave.conf_path, root_dir=copy, ha=HAConfig())
    assert verify_store(copy, config) == []
    store = MessageStore.open(config)
    try:
        mismatches = []
        for message, receipt in zip(messages, receipts, strict=True):
            mismatches += postbox_message_mismatches(store, message, receipt)
        end = store.commit_log.max_position
    finally:
        store.close()
    assert mismatches == []
    segment = config.commit_log.segment_size_bytes
    assert end > segment, "the corpus was meant to cross a segment end"
    assert log_bytes(copy, 0, end, segment) == log_bytes(master_store, 0, end, segment)
    print(f"postbox->java: {len(receipts)} acknowledged messages checked, {end} log bytes "
          f"equal; corpus sent in {send_s:.1f} s")


def postbox_message_mismatches(store: MessageStore, message: Message, receipt) -> list[str]:
    """Where the Java slave's copy of one acknowledged message differs from what was sent: the
    record its message id (the official client's unique key) finds, at the receipt's queue
    offset, and the Java slave's consume queue and index leading to it. Keys are compared as a
    set: the official RocketMQ 5 client keeps a message's keys unordered."""
    where = f"{receipt.message_id}"
    found = store.query_by_unique_key(POSTBOX_TOPIC, receipt.message_id)
    if len(found) != 1:
        return [f"{where}: {len(found)} records in the Java slave's index"]
    (view,) = found
    mismatches = [f"{where} {name}: sent {sent!r}, slave {got!r}" for name, sent, got in (
        ("body", message.body, view.body), ("tags", message.tags, view.tags),
        ("keys", sorted(message.keys), sorted((view.properties.get("KEYS") or "").split())),
        ("colour", "grün", view.properties.get("colour")),
        ("queue_offset", receipt.offset, view.queue_offset)) if sent != got]
    queued = store.get_message("repl-check", POSTBOX_TOPIC, view.queue_id,
                               view.queue_offset, 1).messages
    if [m.log_position for m in queued] != [view.log_position]:
        mismatches.append(f"{where}: the Java slave's consume queue leads to "
                          f"{[m.log_position for m in queued]}")
    if view.log_position not in {m.log_position for m in store.query_by_key(
            POSTBOX_TOPIC, message.keys[0])}:
        mismatches.append(f"{where}: not found by key {message.keys[0]} in the Java index")
    return mismatches


def as_client_message(message: Message):
    """The official client's form of a corpus message (the client makes its own unique key)."""
    return client_message(message.topic, message.body, tag=message.tags,
                          keys=tuple(message.keys), properties=message.properties)


def acknowledged(producer, message) -> bool:
    """One send; False while a SYNC_MASTER answers that its slave is not there yet."""
    try:
        producer.send(message)
    except Exception:  # the client raises its own exception type for a refused send
        return False
    return True

