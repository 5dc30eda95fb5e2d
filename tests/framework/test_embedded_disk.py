"""An embedded store takes little disk for a few messages: ``App("file://...")`` writes 64 MiB
commit-log segments (``EMBEDDED_SEGMENT_SIZE_BYTES``), not RocketMQ's 1 GiB, and still
preallocates each one whole (a full disk is an error when a segment is created, never a SIGBUS
in a write). A size in ``broker_conf`` wins, and an existing store keeps the size it has."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from postbox.framework import App
from postbox.framework.transport import EMBEDDED_SEGMENT_SIZE_BYTES
from postbox.storage_engine import Broker, StoreConfig

GIB = 1 << 30


def disk_bytes(directory: Path) -> int:
    """Bytes the files under ``directory`` take on disk (what ``du`` counts)."""
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*") if path.is_file())


def segments(store: Path) -> list[Path]:
    return sorted((store / "commitlog").iterdir())


def send_a_few(app: App) -> None:
    for number in range(5):
        app.producer.send("orders", f"order {number}", keys=f"order-{number}")
    app.stop()


def test_a_fresh_embedded_store_with_a_few_messages_is_small(tmp_path):
    store = tmp_path / "store"
    send_a_few(App(store.as_uri()))
    assert disk_bytes(store) < EMBEDDED_SEGMENT_SIZE_BYTES + (4 << 20) < GIB // 8
    [segment] = segments(store)
    assert segment.stat().st_size == EMBEDDED_SEGMENT_SIZE_BYTES
    assert segment.stat().st_blocks * 512 >= EMBEDDED_SEGMENT_SIZE_BYTES  # still preallocated


@pytest.mark.parametrize("as_file", [False, True])
def test_a_segment_size_in_broker_conf_wins(tmp_path, as_file):
    size = 4 << 20
    conf: dict[str, str] | Path = {"mappedFileSizeCommitLog": str(size)}
    if as_file:
        conf = tmp_path / "broker.conf"
        conf.write_text(f"# ours\nmappedFileSizeCommitLog = {size}\n")
    store = tmp_path / "store"
    send_a_few(App(store, broker_conf=conf))
    assert [path.stat().st_size for path in segments(store)] == [size]


def test_an_existing_store_keeps_its_segment_size(tmp_path):
    """A store written with other segments (1 GiB ones from before this default; 2 MiB here)
    still opens and grows with them: a segment size is fixed once written."""
    store = tmp_path / "store"
    config = StoreConfig(root_dir=store)
    config = config.replace(commit_log=dataclasses.replace(config.commit_log,
                                                           segment_size_bytes=2 << 20))
    with Broker.open(config) as broker:
        broker.create_topic("orders")
    send_a_few(App(store, broker_conf={"flushDiskType": "SYNC_FLUSH"}))
    assert [path.stat().st_size for path in segments(store)] == [2 << 20]
