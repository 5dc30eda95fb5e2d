"""What makes a directory a store, and the geometry an existing store was written with, so
tools can open it without guessing.

A directory is a store when it holds a ``commitlog/`` directory or a ``checkpoint`` file: every
store Postbox or RocketMQ has opened has the checkpoint, and one that holds messages has the
commit log (a copy may lack the checkpoint). ``require_store`` is the one check inspection tools
(the ``postbox store|query|consumer|dlq`` commands, ``verify_store``) make before reading, so
they never create a store in a directory that is not one. Nothing here writes except
``write_layout``.

File sizes fix most of it (commit-log segment size, consume-queue file size), but an index file's
size ``40 + 4 * slots + 20 * entries`` does not say how it splits. The store therefore records its
geometry in ``postbox-layout.json`` at the store root, outside RocketMQ's own directories (a
RocketMQ broker ignores it). ``infer_config`` reads that file when present and otherwise measures
the files, assuming RocketMQ's 1:4 slot-to-entry ratio for the key index.

``write_open_markers`` writes that file and the ``abort`` marker when a store opens; a disk too
full for them is reported to the caller, which then opens read-only.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path
from typing import Any

from ..config import StoreConfig
from ..errors import NotAStoreError
from .fsutil import atomic_write, fsync_dir

LAYOUT_FILE_NAME = "postbox-layout.json"
STORE_MARKERS = ("commitlog", "checkpoint")
"""Entries of a store root, at least one of which every store has (see the docstring)."""


def is_store(root_dir: str | os.PathLike[str]) -> bool:
    """Whether ``root_dir`` holds a store (``commitlog/`` or ``checkpoint``). Reads only."""
    root = Path(root_dir)
    return (root / "commitlog").is_dir() or (root / "checkpoint").is_file()


def require_store(root_dir: str | os.PathLike[str]) -> Path:
    """``root_dir`` as a ``Path`` if it holds a store, else raise ``NotAStoreError`` saying
    what is missing. Reads only."""
    root = Path(root_dir)
    if not root.exists():
        raise NotAStoreError(f"not a store: {root} does not exist", path=str(root))
    if not root.is_dir():
        raise NotAStoreError(f"not a store: {root} is not a directory", path=str(root))
    if not is_store(root):
        raise NotAStoreError(f"not a store: {root} has no commitlog/ directory and no "
                             "checkpoint file", path=str(root))
    return root


def write_layout(config: StoreConfig) -> None:
    """Record the size settings of ``config`` in the store root (atomic replace)."""
    layout = {
        "segment_size_bytes": config.commit_log.segment_size_bytes,
        "consume_queue_units_per_file": config.consume_queue.units_per_file,
        "key_index_slot_count_max": config.key_index.slot_count_max,
        "key_index_entry_count_max": config.key_index.entry_count_max,
    }
    path = config.root_dir / LAYOUT_FILE_NAME
    data = json.dumps(layout, indent=2, sort_keys=True).encode()
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    atomic_write(path, data)


def write_open_markers(config: StoreConfig, abort_path: Path) -> OSError | None:
    """Write the layout file and the ``abort`` marker (the PID) and fsync the root.

    A full disk (ENOSPC, EDQUOT) is returned, not raised, with no marker left behind: the
    caller opens read-only. Other errors raise.
    """
    try:
        write_layout(config)
        abort_path.write_bytes(str(os.getpid()).encode())
        fsync_dir(config.root_dir)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        abort_path.unlink(missing_ok=True)
        return error
    return None


def infer_config(root_dir: str | os.PathLike[str], base: StoreConfig | None = None) -> StoreConfig:
    """A config for the store at ``root_dir`` whose sizes match its files.

    Settings other than sizes come from ``base`` (defaults when omitted).
    """
    root = Path(root_dir)
    config = (base or StoreConfig(root_dir=root)).replace(root_dir=root)
    layout = _read_layout(root)
    segment = layout.get("segment_size_bytes") or _first_file_size(root / "commitlog")
    if segment:
        config = config.replace(commit_log=dataclasses.replace(
            config.commit_log, segment_size_bytes=segment))
    units = layout.get("consume_queue_units_per_file") or _consume_queue_units(root)
    if units:
        config = config.replace(consume_queue=dataclasses.replace(
            config.consume_queue, units_per_file=units))
    slots = layout.get("key_index_slot_count_max")
    entries = layout.get("key_index_entry_count_max")
    if not slots:
        index_size = _first_file_size(root / "index", digits=17)
        if index_size and (index_size - 40) % 84 == 0:
            slots, entries = (index_size - 40) // 84, (index_size - 40) // 84 * 4
    if slots and entries:
        config = config.replace(key_index=dataclasses.replace(
            config.key_index, slot_count_max=slots, entry_count_max=entries))
    return config


def _read_layout(root: Path) -> dict[str, Any]:
    try:
        layout = json.loads((root / LAYOUT_FILE_NAME).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return layout if isinstance(layout, dict) else {}


def _first_file_size(directory: Path, digits: int = 20) -> int | None:
    if not directory.is_dir():
        return None
    names = sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == digits)
    sizes = [(directory / n).stat().st_size for n in names]
    return next((size for size in sizes if size > 0), None)


def _consume_queue_units(root: Path) -> int | None:
    queues = root / "consumequeue"
    if not queues.is_dir():
        return None
    for topic in sorted(os.listdir(queues)):
        for queue in sorted(os.listdir(queues / topic)):
            size = _first_file_size(queues / topic / queue)
            if size and size % 20 == 0:
                return size // 20
    return None
