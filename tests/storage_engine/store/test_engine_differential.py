"""The same puts through the pure-Python and the native codecs give byte-identical store
files and identical answers (reads, key lookups).

Both stores are written in this process: the codecs the store's modules took from
``formats.engine`` are replaced, for one store, by the reference's and, for the other, by the
extension's. Without the extension this skips (a failure under ``CI=true``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from postbox.storage_engine import Message, MessageStore, StoreConfig
from postbox.storage_engine.clock import FakeClock
from postbox.storage_engine.config import CommitLogConfig
from postbox.storage_engine.contract.message import GetStatus
from postbox.storage_engine.formats import hashing, message_view, properties, record
from postbox.storage_engine.store import commit_log, message_encoder, reader

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

TOPIC = "Differential"
SEGMENT_BYTES = 2 * 1024 * 1024


def codecs(source) -> dict:
    """The engine's codecs as each store module holds them, taken from ``source``."""
    crc = source.masked_crc32 if source is native else hashing.masked_crc32
    unpack = source.unpack_record if source is native else record.unpack_record
    decode = source.decode_properties if source is native else properties.decode_properties
    return {
        commit_log: {"encode_record_parts": (native if source is native else record)
                     .encode_record_parts,
                     "seal_property_crc": (native if source is native else record)
                     .seal_property_crc},
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


def write_and_read(root: Path, source, property_crc: bool,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list]:
    with monkeypatch.context() as patch:
        for module, names in codecs(source).items():
            for name, function in names.items():
                patch.setattr(module, name, function)
        config = StoreConfig(root_dir=root, commit_log=CommitLogConfig(
            segment_size_bytes=SEGMENT_BYTES, append_property_crc=property_crc))
        clock = FakeClock()
        with MessageStore.open(config, clock=clock) as store:
            for i, message in enumerate(messages()):
                store.put_message(message, queue_id=i % 2)  # clock stands still: index file names
            assert store.wait_dispatched(timeout_ms=60_000)
            answers: list = []
            for queue_id in (0, 1):
                got = store.get_message("g", TOPIC, queue_id, 0, max_count=64)
                assert got.status is GetStatus.FOUND
                answers += [(view.as_dict(), view.body) for view in got.messages]
            answers += [view.as_dict() for i in (0, 7, 59)
                        for view in store.query_by_key(TOPIC, f"鍵{i}")]
    files = {str(path.relative_to(root)): path.read_bytes()
             for path in sorted(root.rglob("*")) if path.is_file()}
    return files, answers


@pytest.mark.parametrize("property_crc", [True, False])
def test_both_engines_write_the_same_files_and_answer_alike(tmp_path: Path, property_crc: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    python_files, python_answers = write_and_read(tmp_path / "python", record, property_crc,
                                                  monkeypatch)
    native_files, native_answers = write_and_read(tmp_path / "native", native, property_crc,
                                                  monkeypatch)
    assert sorted(python_files) == sorted(native_files)
    assert any(name.startswith("commitlog") for name in python_files)
    differing = [name for name in python_files if python_files[name] != native_files[name]]
    assert differing == []
    assert python_answers == native_answers
    assert len(python_answers) == 60 + 3
