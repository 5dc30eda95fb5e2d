"""The same puts through the pure-Python and the native codecs give byte-identical store
files and identical answers (reads, key lookups); so do the recoveries that follow (an
unclean stop, then consume queues and key index deleted and rebuilt from the log), which
scan, decode and index through each engine.

Both stores are written in this process: the codecs the store's modules took from
``formats.engine`` are replaced, for one store, by the reference's and, for the other, by the
extension's. Without the extension this skips (a failure under ``CI=true``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from postbox.storage_engine import Message, MessageStore, StoreConfig
from postbox.storage_engine.clock import FakeClock
from postbox.storage_engine.config import CommitLogConfig
from postbox.storage_engine.contract.message import GetStatus
from postbox.storage_engine.formats import hashing, message_view, properties, record
from postbox.storage_engine.store import (
    commit_log,
    dispatch,
    key_index,
    message_encoder,
    reader,
)

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

TOPIC = "Differential"
SEGMENT_BYTES = 2 * 1024 * 1024


def codecs(source) -> dict:
    """The engine's codecs as each store module holds them, taken from ``source``."""
    crc = source.masked_crc32 if source is native else hashing.masked_crc32
    unpack = source.unpack_record if source is native else record.unpack_record
    decode = source.decode_properties if source is native else properties.decode_properties
    records = native if source is native else record
    return {
        commit_log: {"encode_record_parts": records.encode_record_parts,
                     "seal_property_crc": records.seal_property_crc,
                     "scan_records": records.scan_records},
        dispatch: {"decode_run": records.decode_run},
        key_index: {"index_key_hash": (native if source is native else hashing).index_key_hash},
        message_encoder: {"masked_crc32": crc},
        reader: {"masked_crc32": crc},
        message_view: {"masked_crc32": crc, "unpack_record": unpack,
                       "decode_properties": decode},
    }


def messages() -> list[Message]:
    bodies = [b"x", bytes(range(256)) * 4, "énorme ✓".encode() * 40_000, b"\x00" * 100]
    result = []
    for i in range(60):
        body = bodies[i % len(bodies)]
        user = {"clé": f"valeur {i} ✓", "emoji": "😀" * (i % 3)} if i % 2 else None
        result.append(Message(TOPIC, body, tags=f"étiquette-{i % 4}", keys=[f"k{i}", f"鍵{i}"],
                              properties=user,
                              flag=i, born_host="10.0.0.1:9" if i % 3 else "[::1]:10911"))
    return result


def answers_of(store: MessageStore) -> list:
    """Every message read back from both queues, and three key lookups."""
    answers: list = []
    for queue_id in (0, 1):
        got = store.get_message("g", TOPIC, queue_id, 0, max_count=64)
        assert got.status is GetStatus.FOUND
        answers += [(view.as_dict(), view.body) for view in got.messages]
    return answers + [view.as_dict() for i in (0, 7, 59)
                      for view in store.query_by_key(TOPIC, f"鍵{i}")]


def files_of(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


def write_and_read(root: Path, source, property_crc: bool,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list]:
    """Put, read, close; then the two recoveries. Returns the files and answers of each."""
    with monkeypatch.context() as patch:
        for module, names in codecs(source).items():
            for name, function in names.items():
                patch.setattr(module, name, function)
        config = StoreConfig(root_dir=root, commit_log=CommitLogConfig(
            segment_size_bytes=SEGMENT_BYTES, append_property_crc=property_crc))
        clock = FakeClock()  # it stands still: index file names are the same in both stores
        with MessageStore.open(config, clock=clock) as store:
            for i, message in enumerate(messages()):
                store.put_message(message, queue_id=i % 2)
            assert store.wait_dispatched(timeout_ms=60_000)
            answers = [answers_of(store)]
        files = [files_of(root)]
        (root / "abort").write_text("1")  # as if the process had been killed
        with MessageStore.open(config, clock=clock) as store:
            assert not store.stats()["recovery"]["clean_shutdown"]
            answers.append(answers_of(store))
        files.append(files_of(root))
        for derived in ("consumequeue", "index"):
            shutil.rmtree(root / derived)
        with MessageStore.open(config, clock=clock) as store:
            assert store.stats()["recovery"]["dispatch_start"] == 0  # everything rebuilt
            answers.append(answers_of(store))
        files.append(files_of(root))
    return files, answers


@pytest.mark.parametrize("property_crc", [True, False])
def test_both_engines_write_the_same_files_and_answer_alike(tmp_path: Path, property_crc: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    python_files, python_answers = write_and_read(tmp_path / "python", record, property_crc,
                                                  monkeypatch)
    native_files, native_answers = write_and_read(tmp_path / "native", native, property_crc,
                                                  monkeypatch)
    for python_phase, native_phase in zip(python_files, native_files, strict=True):
        assert sorted(python_phase) == sorted(native_phase)
        assert any(name.startswith("commitlog") for name in python_phase)
        differing = [name for name in python_phase
                     if python_phase[name] != native_phase[name]]
        assert differing == []
    assert python_answers == native_answers
    assert python_answers[0] == python_answers[1] == python_answers[2]
    assert len(python_answers[0]) == 60 + 3
    for phase in python_files[1:]:  # the rebuilt queues and index are the ones first written
        for name, data in python_files[0].items():
            if name.startswith(("consumequeue", "index")):
                assert phase[name] == data, name
