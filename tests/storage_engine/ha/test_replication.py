"""Master/slave replication with real processes and real sockets on loopback (reference §14).

Each test runs brokers as ``replication_process`` children (32 KiB segments), talks to them over
stdin/stdout, kills them with SIGKILL where the scenario says so, and checks the files they
leave with ``verify_store`` and byte comparisons. No sleeps as synchronisation: every wait polls
a condition with a deadline.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from postbox.storage_engine import BrokerRole, verify_store
from tests.support.polling import wait_stopped

from .replication_process import QUEUE_COUNT, SEGMENT_SIZE_BYTES, ReplicationProcess, body_for


@pytest.fixture
def processes():
    """Every process a test starts; whatever is still alive at the end is killed."""
    started: list[ReplicationProcess] = []
    yield started
    for process in started:
        if process.process.poll() is None:
            process.kill()


def start_master(processes, root: Path, **options) -> ReplicationProcess:
    master = ReplicationProcess.master(root, **options)
    processes.append(master)
    return master


def start_slave(processes, root: Path, master: ReplicationProcess,
                **options) -> ReplicationProcess:
    slave = ReplicationProcess.slave(root, master.ha_listen, **options)
    processes.append(slave)
    return slave


def wait_slave_connected(master: ReplicationProcess) -> None:
    master.wait_for(lambda s: s["slaves"], what="a slave to connect")


def wait_caught_up(slave: ReplicationProcess, position: int, timeout_s: float = 20) -> dict:
    """Until the slave's log reaches ``position`` and dispatch covered it."""
    status = slave.wait_for(lambda s: s["max_position"] >= position, timeout_s,
                            what=f"slave log to reach {position}")
    assert slave.command(f"wait_dispatched {position} {int(timeout_s * 1000)}")["ok"]
    return status


def log_bytes(root: Path, start: int, end: int) -> bytes:
    """Commit-log bytes [start, end) read from the segment files of a store directory."""
    chunks = []
    position = start
    while position < end:
        base = position - position % SEGMENT_SIZE_BYTES
        with open(root / "commitlog" / f"{base:020d}", "rb") as file:
            file.seek(position - base)
            chunk = file.read(min(end, base + SEGMENT_SIZE_BYTES) - position)
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def record_size(root: Path, position: int) -> int:
    return int.from_bytes(log_bytes(root, position, position + 4), "big")


def assert_same_records(master_root: Path, slave_root: Path, puts: list[dict]) -> None:
    """Each put's record is byte-identical in both stores."""
    for put in puts:
        size = record_size(master_root, put["position"])
        assert log_bytes(slave_root, put["position"], put["position"] + size) == log_bytes(
            master_root, put["position"], put["position"] + size), put


# ---- 1. same positions, same offsets, queues and index built ---------------------------------


def test_slave_serves_the_masters_records_at_the_same_positions(tmp_path, processes):
    master = start_master(processes, tmp_path / "master")
    slave = start_slave(processes, tmp_path / "slave", master)
    wait_slave_connected(master)

    puts = master.put(300, "m", body_bytes=300)  # ~110 KiB: four segments
    assert {p["status"] for p in puts} == {"PUT_OK"}
    end = master.status()["max_position"]
    assert end > 3 * SEGMENT_SIZE_BYTES
    wait_caught_up(slave, end)

    for put in puts[::7] + puts[-3:]:
        on_slave = slave.command(f"read {put['position']}")
        on_master = master.command(f"read {put['position']}")
        assert on_slave == on_master
        assert (on_slave["queue_offset"], on_slave["keys"]) == (put["queue_offset"],
                                                                [put["key"]])
    for queue_id in range(QUEUE_COUNT):  # pull by queue offset on the slave
        mine = [p for p in puts if p["queue_id"] == queue_id]
        pulled = slave.command(f"pull orders {queue_id} 5 32")
        assert pulled["status"] == "FOUND"
        assert [(m["queue_offset"], m["position"]) for m in pulled["messages"]] == [
            (p["queue_offset"], p["position"]) for p in mine[5:37]]
    for put in puts[::50]:  # lookup by key on the slave
        assert slave.command(f"query_key orders {put['key']}")["positions"] == [put["position"]]

    slave.close()
    master.close()
    assert verify_store(tmp_path / "slave") == []
    assert verify_store(tmp_path / "master") == []
    assert log_bytes(tmp_path / "slave", 0, end) == log_bytes(tmp_path / "master", 0, end)


# ---- 2. SYNC_MASTER: acknowledged means on the slave; statuses without a slave ---------------


def test_sync_master_acknowledged_puts_survive_a_master_kill(tmp_path, processes):
    master = start_master(processes, tmp_path / "master", slave_timeout_ms=2_000)
    slave = start_slave(processes, tmp_path / "slave", master)
    wait_slave_connected(master)

    master.send("put 1000000 k 200")  # an endless stream; killed mid-way
    acknowledged = []
    while len(acknowledged) < 400:
        line = master.read_line()
        assert line["event"] == "put" and line["status"] == "PUT_OK", line
        acknowledged.append(line)
    master.kill()

    last = acknowledged[-1]
    assert slave.status()["max_position"] >= last["position"] + record_size(
        tmp_path / "master", last["position"])
    wait_caught_up(slave, last["position"] + 1)
    for put in acknowledged[::13] + acknowledged[-5:]:
        record = slave.command(f"read {put['position']}")
        assert record["keys"] == [put["key"]]
        assert record["body"].encode("latin-1") == body_for(put["key"], 200)
        assert record["queue_offset"] == put["queue_offset"]
    assert_same_records(tmp_path / "master", tmp_path / "slave", acknowledged)
    slave.close()
    assert verify_store(tmp_path / "slave") == []


def test_sync_master_reports_a_missing_or_silent_slave(tmp_path, processes):
    timeout_ms = 400
    master = start_master(processes, tmp_path / "master", slave_timeout_ms=timeout_ms)
    (alone,) = master.put(1, "alone")
    assert alone["status"] == "SLAVE_NOT_AVAILABLE"
    assert alone["elapsed_ms"] < timeout_ms / 2  # no slave: no wait at all

    slave = start_slave(processes, tmp_path / "slave", master)
    wait_slave_connected(master)
    assert {p["status"] for p in master.put(5, "ok")} == {"PUT_OK"}

    os.kill(slave.process.pid, signal.SIGSTOP)  # connected, but acknowledges nothing
    try:
        wait_stopped(slave.process.pid)
        stalled = master.put(2, "stalled")
    finally:
        os.kill(slave.process.pid, signal.SIGCONT)
    assert [p["status"] for p in stalled] == ["FLUSH_SLAVE_TIMEOUT"] * 2
    for put in stalled:
        assert timeout_ms * 0.9 <= put["elapsed_ms"] < timeout_ms * 3, put

    end = master.status()["max_position"]
    wait_caught_up(slave, end)  # the slave resumes and catches up
    assert {p["status"] for p in master.put(3, "again")} == {"PUT_OK"}

    slave.close()
    master.wait_for(lambda s: not s["slaves"], what="the master to notice the slave left")
    gone = master.put(2, "gone")
    assert [p["status"] for p in gone] == ["SLAVE_NOT_AVAILABLE"] * 2
    master.close()
    assert verify_store(tmp_path / "slave") == []


# ---- 3. catch-up -----------------------------------------------------------------------------


def test_a_late_or_restarted_slave_catches_up_across_segments(tmp_path, processes):
    master = start_master(processes, tmp_path / "master", sync=False)
    early = master.put(120, "early", body_bytes=500)  # two segments before any slave
    end = master.status()["max_position"]
    last_segment = end - end % SEGMENT_SIZE_BYTES
    assert last_segment > 0

    slave = start_slave(processes, tmp_path / "slave", master)  # started late, empty
    status = wait_caught_up(slave, end)
    assert status["max_position"] == end
    copied = [p for p in early if p["position"] >= last_segment]
    assert_same_records(tmp_path / "master", tmp_path / "slave", copied)  # last segment on
    slave.close()

    middle = master.put(400, "middle", body_bytes=600)  # ~8 segments while the slave is down
    end = master.status()["max_position"]
    assert end - status["max_position"] > 6 * SEGMENT_SIZE_BYTES

    slave = start_slave(processes, tmp_path / "slave", master)
    wait_caught_up(slave, end)
    assert slave.status()["max_position"] == end
    assert_same_records(tmp_path / "master", tmp_path / "slave", middle)
    for put in middle[::40]:
        assert slave.command(f"query_key orders {put['key']}")["positions"] == [put["position"]]
    slave.close()
    master.close()
    assert verify_store(tmp_path / "slave") == []
    assert log_bytes(tmp_path / "slave", last_segment, end) == log_bytes(
        tmp_path / "master", last_segment, end)


# ---- 5. a slave writes nothing of its own ----------------------------------------------------


def test_slave_refuses_writes_and_does_not_deliver_delayed_messages(tmp_path, processes):
    master = start_master(processes, tmp_path / "master", sync=False)
    slave = start_slave(processes, tmp_path / "slave", master)
    wait_slave_connected(master)

    refused = slave.command("put 1 nope")
    assert (refused["event"], refused["type"]) == ("error", "NotMasterError")
    status = slave.status()
    assert status["role"] == "SLAVE" and not status["delay_service_running"]
    assert status["max_position"] == 0

    delayed = master.command("delay orders 1 later")  # 200 ms level
    assert delayed["topic"] == "SCHEDULE_TOPIC_XXXX"
    master.wait_for(lambda s: "orders" in s["topics"], what="the master to deliver")
    end = master.status()["max_position"]
    wait_caught_up(slave, end)
    assert slave.command("query_key orders later")["positions"] == master.command(
        "query_key orders later")["positions"]

    slave.close()
    master.close()
    assert verify_store(tmp_path / "slave") == []
    # Everything in the slave's log came from the master, byte for byte: nothing of its own.
    assert log_bytes(tmp_path / "slave", 0, end) == log_bytes(tmp_path / "master", 0, end)
    assert not (tmp_path / "slave" / "commitlog" / f"{SEGMENT_SIZE_BYTES:020d}").exists()


# ---- 6. manual promotion ---------------------------------------------------------------------


@pytest.mark.parametrize("slave_stop", ["close", "kill"])
def test_promoted_slave_continues_at_its_max_position(tmp_path, processes, slave_stop):
    master = start_master(processes, tmp_path / "master")
    slave = start_slave(processes, tmp_path / "slave", master)
    wait_slave_connected(master)
    before = master.put(150, "before", body_bytes=250)
    assert {p["status"] for p in before} == {"PUT_OK"}
    acked_end = before[-1]["position"] + record_size(tmp_path / "master", before[-1]["position"])
    master.kill()

    # The procedure of docs/replication.md: stop the slave, restart its directory as a master.
    getattr(slave, slave_stop)()
    promoted = start_master(processes, tmp_path / "slave", sync=False)
    assert promoted.start_position == acked_end
    status = promoted.status()
    assert status["role"] == "ASYNC_MASTER"

    after = promoted.put(8, "after", body_bytes=250)
    assert {p["status"] for p in after} == {"PUT_OK"}
    assert after[0]["position"] == acked_end
    for queue_id in range(QUEUE_COUNT):  # queue offsets continue too
        last_before = max(p["queue_offset"] for p in before if p["queue_id"] == queue_id)
        first_after = min(p["queue_offset"] for p in after if p["queue_id"] == queue_id)
        assert first_after == last_before + 1
    for put in before[::11] + before[-2:]:
        assert promoted.command(f"read {put['position']}")["keys"] == [put["key"]]
    assert promoted.command(f"query_key orders {before[3]['key']}")["positions"] == [
        before[3]["position"]]

    # A new slave of the promoted master copies from it.
    new_slave = start_slave(processes, tmp_path / "new-slave", promoted)
    end = promoted.status()["max_position"]
    wait_caught_up(new_slave, end)
    new_slave.close()
    promoted.close()
    assert verify_store(tmp_path / "slave") == []
    assert verify_store(tmp_path / "new-slave") == []


def test_roles_are_reported(tmp_path, processes):
    master = start_master(processes, tmp_path / "master")
    assert master.status()["role"] == BrokerRole.SYNC_MASTER.value
    slave = start_slave(processes, tmp_path / "slave", master)
    status = slave.wait_for(lambda s: s["connected"], what="the slave to connect")
    assert status["master_address"] == master.ha_listen
    master_status = master.wait_for(lambda s: s["slaves"], what="the slave to be listed")
    assert master_status["slaves"][0]["behind_bytes"] == 0
    slave.close()
    master.close()
