"""A consumer meets a damaged record: it skips it with an alert and goes on (issue 19 item 1).

Real brokers on real store files; the damage is a flipped bit in a segment file between two
runs. Two paths: damage in an old segment that open does not scan (the store opens; the pull
that reaches the record skips it with a ``[read] [corruption]`` alert), and damage that makes
open refuse until ``repair_store`` sets it aside (the pull skips it with ``[read] [set-aside]``).
Either way every other message is delivered once and the consumer passes the damaged offset.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from postbox.framework import App, ConsumerOptions
from postbox.storage_engine import Broker, repair_store, verify_store
from postbox.storage_engine.errors import MidLogCorruptionError
from tests.storage_engine.conftest import small_config
from tests.support.polling import wait_until

FAST = ConsumerOptions(long_polling_ms=200, rebalance_interval_ms=100, persist_interval_ms=100)
COUNT = 300


def _write(root: Path):
    """``COUNT`` 1 KiB messages over several 64 KiB segments; returns (config, positions)."""
    config = small_config(root, tiny=False)
    broker = Broker.open(config)
    try:
        producer = App(broker=broker).producer
        for i in range(COUNT):
            producer.send("events", f"m{i:04d}-" + "x" * 1000)
        assert broker.store.wait_dispatched()
        positions = [(v.log_position, v.body.decode()) for v in broker.store.iter_messages(0)
                     if v.topic == "events"]
    finally:
        broker.close()
    return config, positions


def _flip_body_bit(config, position: int) -> None:
    size = config.commit_log.segment_size_bytes
    path = config.root_dir / "commitlog" / f"{position - position % size:020d}"
    data = bytearray(path.read_bytes())
    data[position % size + 100] ^= 0x08  # inside the body: body and record CRCs break
    path.write_bytes(bytes(data))


def _consume_all(config) -> tuple[dict[str, int], Broker]:
    broker = Broker.open(config)
    received: dict[str, int] = {}
    lock = threading.Lock()
    app = App(broker=broker, consumer_options=FAST)

    @app.handler(topic="events", consumer_group="g")
    def handle(message) -> None:
        with lock:
            received[message.text] = received.get(message.text, 0) + 1

    app.start()
    try:
        wait_until(lambda: len(received) == COUNT - 1)
        app.producer.send("events", "after")  # past the damaged offset: still delivered
        wait_until(lambda: "after" in received)
    finally:
        app.stop()
    return received, broker


@pytest.mark.parametrize("where", ["old segment, not repaired", "repaired"])
def test_consumer_passes_a_damaged_offset_with_an_alert(tmp_path, caplog, where):
    config, positions = _write(tmp_path / "store")
    segments = sorted((config.root_dir / "commitlog").iterdir())
    assert len(segments) >= 5
    if where == "repaired":
        target = int(segments[-3].name) + 2000
    else:
        target = int(segments[0].name) + 2000
    victim_position, victim_text = next((p, t) for p, t in positions if p >= target)
    _flip_body_bit(config, victim_position)
    if where == "repaired":
        with pytest.raises(MidLogCorruptionError):
            Broker.open(config)
        assert len(repair_store(config.root_dir).set_aside) == 1
    with caplog.at_level(logging.WARNING, logger="postbox.storage_engine.store.reader"):
        received, broker = _consume_all(config)
    try:
        assert victim_text not in received
        assert set(received) == {t for _p, t in positions if t != victim_text} | {"after"}
        assert set(received.values()) == {1}
        tag = "[read] [set-aside]" if where == "repaired" else "[read] [corruption]"
        assert any(tag in m and f"position={victim_position}" in m for m in caplog.messages)
    finally:
        broker.close()
    if where == "repaired":
        assert verify_store(config.root_dir) == []
