"""The HA protocol pieces on real sockets (socket pairs and loopback listeners), in one process.

Frames are read off the wire and checked against the master's segment bytes: at most one batch,
never across a segment end, blank tails included; the slave's apply rule rejects a frame at the
wrong position and reconnects; both sides close a silent connection; SYNC waiters are released
by acknowledgements in target order.
"""

from __future__ import annotations

import random
import socket
import time

import pytest

from postbox.storage_engine import (
    BrokerRole,
    CommitLogConfig,
    ConfigError,
    ConsumeQueueConfig,
    HAConfig,
    KeyIndexConfig,
    Message,
    MessageStore,
    NotMasterError,
    StorageIOError,
    StoreConfig,
    SystemClock,
    verify_store,
)
from postbox.storage_engine.errors import ReplicationError
from postbox.storage_engine.formats import BLANK_MAGIC
from postbox.storage_engine.group_commit import PositionWaiters
from postbox.storage_engine.ha.connection import SlaveConnection
from postbox.storage_engine.ha.protocol import (
    FRAME_HEADER_SIZE_BYTES,
    FrameDecoder,
    ReportDecoder,
    encode_frame_header,
    encode_report,
    frame_body_size,
    transfer_start,
)
from postbox.storage_engine.ha.slave import HASlaveClient
from tests.support.polling import wait_until

SEGMENT = 4096


def small_config(root, role=BrokerRole.ASYNC_MASTER, **ha) -> StoreConfig:
    return StoreConfig(root_dir=root, broker_role=role,
                       commit_log=CommitLogConfig(segment_size_bytes=SEGMENT),
                       consume_queue=ConsumeQueueConfig(units_per_file=32),
                       key_index=KeyIndexConfig(slot_count_max=64, entry_count_max=256),
                       ha=HAConfig(**ha))


def put_random(store: MessageStore, count: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    print(f"seed={seed}")
    for i in range(count):
        store.put_message(Message("t", rng.randbytes(rng.randrange(10, 900)), keys=[f"k{i}"]),
                          queue_id=i % 3)


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


# ---- pure pieces -----------------------------------------------------------------------------


def test_frame_decoder_reassembles_frames_from_any_chunking():
    frames = [(0, b"abc"), (3, b""), (3, bytes(range(200)) * 3), (603, b"z")]
    stream = b"".join(encode_frame_header(start, len(body)) + body for start, body in frames)
    rng = random.Random(3)
    decoder = FrameDecoder(body_size_max=SEGMENT)
    got = []
    position = 0
    while position < len(stream):
        step = rng.randrange(1, 40)
        got.extend(decoder.feed(stream[position:position + step]))
        position += step
    assert got == frames and decoder.pending_bytes == 0
    with pytest.raises(ValueError, match="body bytes"):
        list(FrameDecoder(body_size_max=10).feed(encode_frame_header(0, 11)))
    assert FRAME_HEADER_SIZE_BYTES == 12


def test_report_decoder_keeps_the_newest_complete_report():
    decoder = ReportDecoder()
    data = encode_report(5) + encode_report(9) + encode_report(70)[:3]
    assert decoder.feed(data) == 9
    assert decoder.feed(b"") is None
    assert decoder.feed(encode_report(70)[3:]) == 70


def test_transfer_start_and_frame_size_rules():
    assert transfer_start(0, 10_000, SEGMENT) == 8192  # empty slave: the last segment
    assert transfer_start(0, 0, SEGMENT) == 0
    assert transfer_start(5000, 10_000, SEGMENT) == 5000
    assert frame_body_size(4000, 0, SEGMENT, 1000) == 96  # stops at the segment end
    assert frame_body_size(100, 0, 600, 1000) == 500  # stops at the written end
    assert frame_body_size(100, 0, 5000, 1000) == 1000  # one batch


def test_ha_config_and_broker_conf_keys(tmp_path):
    config = StoreConfig.from_broker_conf({
        "brokerRole": "SLAVE", "haListenPort": "10912", "haMasterAddress": "10.0.0.1:10912",
        "haSendHeartbeatInterval": "1000", "haHousekeepingInterval": "4000",
        "haTransferBatchSize": "65536", "haSlaveFallbehindMax": "1024", "slaveTimeout": "700",
    }, strict=True, root_dir=tmp_path)
    assert config.broker_role is BrokerRole.SLAVE
    assert config.ha == HAConfig(ha_listen="0.0.0.0:10912", master_address="10.0.0.1:10912",
                                 heartbeat_interval_ms=1000, housekeeping_interval_ms=4000,
                                 transfer_batch_bytes=65536, slave_fall_behind_max_bytes=1024,
                                 slave_timeout_ms=700)
    assert StoreConfig(root_dir=tmp_path).ha == HAConfig()  # off by default
    with pytest.raises(ConfigError, match=r"ha\.master_address"):
        HAConfig(master_address="nowhere")
    with pytest.raises(ConfigError, match="housekeeping"):
        HAConfig(heartbeat_interval_ms=5000, housekeeping_interval_ms=5000)


# ---- the master's frames, applied by a slave -------------------------------------------------


def test_frames_stay_in_one_segment_copy_blank_tails_and_apply_at_the_same_positions(
        tmp_path):
    master = MessageStore.open(small_config(tmp_path / "master"))
    slave = MessageStore.open(small_config(tmp_path / "slave", BrokerRole.SLAVE))
    ours, theirs = socket.socketpair()
    acks = PositionWaiters()
    config = HAConfig(transfer_batch_bytes=1000, heartbeat_interval_ms=100)
    connection = SlaveConnection(ours, "pair", master.commit_log, config, acks, SystemClock(),
                                 lambda _c: None)
    connection.start()
    client = HASlaveClient(slave.commit_log, HAConfig(), SystemClock(), slave.dispatch.wakeup)
    try:
        theirs.sendall(encode_report(0))  # an empty slave, connected before any data
        # its transfer starts at 0 only if the writer took the report before the puts (an empty
        # slave gets the last segment from its start: on a loaded CI lane, 4 096 once)
        wait_until(lambda: connection.transfer_position == 0, what="the transfer's start")
        put_random(master, 60)
        connection.notify_data()
        end = master.commit_log.max_position
        assert end > 4 * SEGMENT
        decoder = FrameDecoder(SEGMENT)
        frames: list[tuple[int, bytes]] = []
        position = 0
        while position < end:
            for start, body in decoder.feed(theirs.recv(65536)):
                if body:
                    frames.append((start, body))
                    position = start + len(body)
        blank_tails = 0
        for start, body in frames:
            assert len(body) <= 1000
            assert start // SEGMENT == (start + len(body) - 1) // SEGMENT, "crosses a segment"
            segment = master.commit_log.segments.find(start)
            offset = start - segment.base_position
            assert body == segment.buffer[offset:offset + len(body)]
            if (start + len(body)) % SEGMENT == 0:  # the blank tail went as raw bytes
                blank_tails += _ends_with_blank(master, start + len(body))
        assert [s for s, _ in frames] == [0] + [s + len(b) for s, b in frames[:-1]]
        assert blank_tails >= 3

        # An idle master sends an empty heartbeat frame at its transfer position.
        heartbeat = next(decoder.feed(read_exactly(theirs, FRAME_HEADER_SIZE_BYTES)))
        assert heartbeat == (end, b"")

        # The slave applies all but the last frame (its log then ends inside a record).
        for start, body in frames[:-1]:
            assert client.apply_frame(start, body)
        with pytest.raises(ReplicationError, match="ends at"):
            client.apply_frame(frames[-1][0] + 1, frames[-1][1])
        partial_end = slave.commit_log.max_position
        theirs.sendall(encode_report(partial_end))
        wait_until(lambda: acks.position == partial_end, what="the acknowledgement")
        assert connection.acked_position == partial_end
        with pytest.raises(NotMasterError):
            slave.put_message(Message("t", b"mine"))
    finally:
        connection.close("test over")
        connection.join()
        theirs.close()
    slave.close()  # trims the partial last record
    master.close()
    assert verify_store(tmp_path / "slave") == []
    reopened = MessageStore.open(small_config(tmp_path / "slave", BrokerRole.SLAVE))
    try:
        boundary = reopened.commit_log.max_position
        assert boundary < partial_end
        assert reopened.read_message(0).keys == ["k0"]
        assert reopened.get_message("g", "t", 0, 0).status.value == "FOUND"
    finally:
        reopened.close()


def _ends_with_blank(store: MessageStore, segment_end: int) -> int:
    """1 when the segment ending at ``segment_end`` closes with a blank record."""
    segment = store.commit_log.segments.find(segment_end - 1)
    position = 0
    while position < SEGMENT:
        size = int.from_bytes(segment.buffer[position:position + 4], "big", signed=True)
        magic = int.from_bytes(segment.buffer[position + 4:position + 8], "big", signed=True)
        if magic == BLANK_MAGIC:
            return 1
        if size <= 0:
            return 0
        position += size
    return 0


# ---- the slave's client against a scripted master --------------------------------------------


@pytest.fixture
def fake_master():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    yield listener
    listener.close()


def test_a_frame_at_a_wrong_position_makes_the_slave_reconnect(tmp_path, fake_master):
    source = MessageStore.open(small_config(tmp_path / "source"))
    put_random(source, 3)
    head = bytes(source.commit_log.segments.find(0).buffer[:500])  # ends inside record 2
    source.close()
    host, port = fake_master.getsockname()
    slave = MessageStore.open(small_config(tmp_path / "slave", BrokerRole.SLAVE,
                                           master_address=f"{host}:{port}"))
    try:
        first, _ = fake_master.accept()
        assert read_exactly(first, 8) == encode_report(0)
        first.sendall(encode_frame_header(0, len(head)) + head)
        assert read_exactly(first, 8) == encode_report(500)
        first.sendall(encode_frame_header(12_345, 3) + b"bad")
        first.settimeout(10)
        assert first.recv(100) == b"", "the slave must close the connection"
        first.close()

        second, _ = fake_master.accept()  # the reconnect
        assert read_exactly(second, 8) == encode_report(500)
        second.close()
        assert slave.failure is None
        wait_until(lambda: slave.max_offset("t", 0) == 1, what="the whole first record dispatched")
        assert slave.ha_status()["connect_count"] >= 2
    finally:
        slave.close()
    assert verify_store(tmp_path / "slave") == []


def test_slave_heartbeats_and_leaves_a_silent_master(tmp_path, fake_master):
    host, port = fake_master.getsockname()
    slave = MessageStore.open(small_config(
        tmp_path / "slave", BrokerRole.SLAVE, master_address=f"{host}:{port}",
        heartbeat_interval_ms=100, housekeeping_interval_ms=400))
    try:
        sock, _ = fake_master.accept()
        started = time.monotonic()
        received = b""
        while chunk := sock.recv(64):
            received += chunk
        silent_s = time.monotonic() - started
        assert len(received) // 8 >= 3  # the first report, then heartbeats
        assert set(received[i:i + 8] for i in range(0, len(received), 8)) == {encode_report(0)}
        assert 0.35 <= silent_s < 5
        sock.close()
        fake_master.accept()[0].close()  # and it comes back
    finally:
        slave.close()


def test_master_closes_a_silent_slave(tmp_path):
    master = MessageStore.open(small_config(tmp_path / "master", ha_listen="127.0.0.1:0",
                                            heartbeat_interval_ms=100,
                                            housekeeping_interval_ms=300))
    try:
        address = master.ha_listen_address
        with socket.create_connection(address) as silent:  # never reports
            silent.settimeout(10)
            assert silent.recv(100) == b""
        with socket.create_connection(address) as quiet:  # reports once, then nothing
            quiet.settimeout(10)
            quiet.sendall(encode_report(0))
            received = b""
            while chunk := quiet.recv(100):
                received += chunk
            assert received[:FRAME_HEADER_SIZE_BYTES] == encode_frame_header(0, 0)  # heartbeat
        wait_until(lambda: not master.ha_status()["slaves"], what="the connection to be dropped")
    finally:
        master.close()


def test_a_busy_ha_port_fails_the_open_with_the_setting_named(tmp_path):
    first = MessageStore.open(small_config(tmp_path / "first", ha_listen="127.0.0.1:0"))
    try:
        host, port = first.ha_listen_address
        with pytest.raises(StorageIOError, match=r"ha\.ha_listen"):
            MessageStore.open(small_config(tmp_path / "second", ha_listen=f"{host}:{port}"))
        # the failed open released its lock: the directory opens again
        MessageStore.open(small_config(tmp_path / "second")).close()
    finally:
        first.close()
