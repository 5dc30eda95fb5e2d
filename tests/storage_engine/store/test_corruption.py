"""Mid-log corruption (issue 19 item 1): damage followed by valid records is never cut.

A torn tail (nothing valid after the first bad byte) is cut at open, as before (the power-loss,
crash and recovery tests keep covering that). A damaged record with valid, acknowledged records
after it makes ``MessageStore.open`` refuse with ``MidLogCorruptionError`` and change nothing;
``repair_store`` sets the damaged bytes aside and every other record stays readable at its
position and queue offset; a pull skips the damaged offset with an alert; ``verify_store`` names
the damage. Real stores on real files; the damage is real bytes changed in the segment files.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.storage_engine import (
    CorruptionError,
    FlushConfig,
    FlushMode,
    GetStatus,
    Message,
    MessageStore,
    PutResult,
    PutStatus,
    StoreConfig,
    repair_store,
    verify_store,
)
from postbox.storage_engine.errors import MidLogCorruptionError
from tests.storage_engine.conftest import small_config

TOPIC = "orders"
QUEUE_COUNT = 2


def _sync_config(root: Path, **kwargs) -> StoreConfig:
    return small_config(root, flush=FlushConfig(mode=FlushMode.SYNC), **kwargs)


def _write_store(config: StoreConfig, count: int) -> tuple[list[PutResult], dict[int, bytes]]:
    """``count`` acknowledged SYNC puts over two queues, then a clean close.

    Returns the put results and each record's body by log position.
    """
    results, bodies = [], {}
    with MessageStore.open(config) as store:
        for start in range(0, count, 50):
            batch = [Message(TOPIC, b"m%05d-" % i + random.Random(i).randbytes(60),
                             keys=[f"k{i}"]) for i in range(start, min(count, start + 50))]
            for queue_id in range(QUEUE_COUNT):
                part = batch[queue_id::QUEUE_COUNT]
                acknowledged = store.put_messages(part, queue_id)
                for message, result in zip(part, acknowledged, strict=True):
                    assert result.status is PutStatus.PUT_OK, result
                    results.append(result)
                    bodies[result.log_position] = message.body
        assert store.wait_dispatched()
    return results, bodies


def _segment_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def _log_bytes(root: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in _segment_files(root)}


def _flip_bit(path: Path, offset: int, bit: int = 4) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def _pull_all(store: MessageStore, queue_id: int) -> tuple[list, int]:
    """A consumer's pull loop over one queue: every message, and the offset it ends at.

    Fails if the loop stops making progress (a consumer stuck at an offset).
    """
    messages, offset = [], store.min_offset(TOPIC, queue_id)
    while offset < store.max_offset(TOPIC, queue_id):
        result = store.get_message("g", TOPIC, queue_id, offset, 16)
        assert result.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE), result
        assert result.next_offset > offset, f"pull stuck at offset {offset}: {result}"
        messages.extend(result.messages)
        offset = result.next_offset
    return messages, offset


def _record_in_segment(results: list[PutResult], segment: Path, size_bytes: int,
                       index: int) -> PutResult:
    """The ``index``-th acknowledged record stored in ``segment`` (log order)."""
    base = int(segment.name)
    inside = sorted((r for r in results if base <= r.log_position < base + size_bytes),
                    key=lambda r: r.log_position)
    return inside[index]


# ---- (a) the scenario -------------------------------------------------------------------

def test_one_flipped_bit_in_the_third_last_segment_refuses_open_then_repair_keeps_the_rest(
        tmp_path, caplog):
    config = _sync_config(tmp_path / "store", tiny=False)  # 64 KiB segments
    results, bodies = _write_store(config, 2500)
    segments = _segment_files(config.root_dir)
    assert len(segments) >= 6
    victim = _record_in_segment(results, segments[-3], 65536, 40)
    _flip_bit(segments[-3], victim.log_position - int(segments[-3].name) + 120)
    before = _log_bytes(config.root_dir)

    with pytest.raises(MidLogCorruptionError) as refused:
        MessageStore.open(config)
    error = refused.value
    later = sum(1 for r in results if r.log_position > victim.log_position)
    assert error.log_position == victim.log_position
    assert error.path == str(segments[-3])
    assert error.valid_records_after == later
    text = str(error)
    for fragment in (segments[-3].name, f"position={victim.log_position}", "CRC",
                     f"{later} valid record(s) follow", "postbox store repair",
                     "Nothing was deleted"):
        assert fragment in text, text
    assert _log_bytes(config.root_dir) == before, "a refused open changed the commit log"

    report = repair_store(config.root_dir)
    (set_aside,) = report.set_aside
    assert (set_aside["position"], set_aside["end"]) == (
        victim.log_position, victim.log_position + victim.store_size)
    assert set_aside["replaced_by"] == "placeholder record"
    damaged_dir = config.root_dir / "damaged"
    kept = (damaged_dir / set_aside["bytes_file"]).read_bytes()
    segment_offset = victim.log_position - int(segments[-3].name)
    assert kept == before[segments[-3].name][segment_offset:segment_offset + len(kept)]
    assert json.loads((damaged_dir / (set_aside["bytes_file"][:-4] + ".json")).read_text())[
        "reason"] == set_aside["reason"]

    with MessageStore.open(config) as store:
        for result in results:
            if result.log_position == victim.log_position:
                with pytest.raises(CorruptionError, match="set aside"):
                    store.read_message(result.log_position)
                continue
            view = store.read_message(result.log_position)
            assert (view.queue_offset, view.body) == (result.queue_offset,
                                                      bodies[result.log_position])
        with caplog.at_level(logging.WARNING, logger="postbox.storage_engine.store.reader"):
            pulled, end = _pull_all(store, victim.queue_id)
        expected = [r.log_position for r in results
                    if r.queue_id == victim.queue_id and r is not victim]
        assert [m.log_position for m in pulled] == expected
        assert end == store.max_offset(TOPIC, victim.queue_id)
        assert any("[set-aside]" in line and f"offset={victim.queue_offset}" in line
                   for line in caplog.messages)
        assert store.stats()["commit_log"]["damaged_units_skipped"] == 1
        appended = store.put_message(Message(TOPIC, b"after repair"), victim.queue_id)
        assert appended.queue_offset == sum(1 for r in results if r.queue_id == victim.queue_id)
    assert verify_store(config.root_dir) == []


def test_zeroed_span_in_a_middle_segment_is_not_taken_for_the_end(tmp_path):
    """A lost write (zeros from a record start to its segment's end) with later segments intact:
    zeros look like the end of data, but valid records follow."""
    config = _sync_config(tmp_path / "store")  # 8 KiB segments
    results, _bodies = _write_store(config, 400)
    segments = _segment_files(config.root_dir)
    victim = _record_in_segment(results, segments[-2], 8192, 3)
    offset = victim.log_position - int(segments[-2].name)
    data = bytearray(segments[-2].read_bytes())
    data[offset:] = bytes(len(data) - offset)
    segments[-2].write_bytes(bytes(data))
    with pytest.raises(MidLogCorruptionError, match="zeros where a record should start"):
        MessageStore.open(config)
    assert [p.name for p in _segment_files(config.root_dir)] == [p.name for p in segments]
    repair_store(config.root_dir)
    with MessageStore.open(config) as store:
        lost = [r for r in results if victim.log_position <= r.log_position
                < int(segments[-1].name)]
        for result in results:
            if result not in lost:
                assert store.read_message(result.log_position).queue_offset == \
                    result.queue_offset
        for queue_id in range(QUEUE_COUNT):
            pulled, _end = _pull_all(store, queue_id)
            assert len(pulled) == sum(1 for r in results
                                      if r.queue_id == queue_id and r not in lost)
    assert verify_store(config.root_dir) == []


# ---- (b) random damage: no valid record after the damage is ever lost ----------------------------

_TEMPLATE_RECORDS = 300
_TEMPLATES: dict[str, tuple[Path, list[PutResult], dict[int, bytes]]] = {}
FIGURES = {"examples": 0, "acknowledged": 0, "untouched": 0, "kept": 0, "refused": 0}


def _template(tmp_path_factory) -> tuple[Path, list[PutResult], dict[int, bytes]]:
    if "store" not in _TEMPLATES:
        root = tmp_path_factory.mktemp("template") / "store"
        results, bodies = _write_store(_sync_config(root), _TEMPLATE_RECORDS)
        _TEMPLATES["store"] = (root, results, bodies)
    return _TEMPLATES["store"]


_damage = st.tuples(st.sampled_from(["flip", "garbage", "zeros"]), st.floats(0, 1),
                    st.integers(0, 8191), st.integers(1, 300), st.integers(0, 7))


EXAMPLES = int(os.environ.get("CORRUPTION_EXAMPLES", "60"))  # more for a longer hunt


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(damages=st.lists(_damage, min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_random_damage_never_loses_a_valid_record(tmp_path_factory, damages, seed):
    template, results, bodies = _template(tmp_path_factory)
    root = tmp_path_factory.mktemp("damaged") / "store"
    shutil.copytree(template, root)
    config = _sync_config(root)
    segments = _segment_files(root)
    hit: list[tuple[int, int]] = []  # damaged log ranges
    rng = random.Random(seed)
    for kind, where, offset, length, bit in damages:
        segment = segments[min(int(where * len(segments)), len(segments) - 1)]
        data = bytearray(segment.read_bytes())
        length = 1 if kind == "flip" else min(length, len(data) - offset)
        if kind == "flip":
            data[offset] ^= 1 << bit
        else:
            data[offset:offset + length] = (rng.randbytes(length) if kind == "garbage"
                                            else bytes(length))
        segment.write_bytes(bytes(data))
        hit.append((int(segment.name) + offset, int(segment.name) + offset + length))

    try:
        MessageStore.open(config).close()
    except MidLogCorruptionError:
        FIGURES["refused"] += 1
        repair_store(root)
    untouched = [r for r in results
                 if not any(start < r.log_position + r.store_size and r.log_position < end
                            for start, end in hit)]
    with MessageStore.open(config) as store:
        kept = 0
        for result in untouched:
            view = store.read_message(result.log_position)
            assert (view.queue_offset, view.body) == (result.queue_offset,
                                                      bodies[result.log_position])
            kept += 1
        for queue_id in range(QUEUE_COUNT):
            pulled, _end = _pull_all(store, queue_id)
            positions = {m.log_position for m in pulled}
            assert all(r.log_position in positions for r in untouched if r.queue_id == queue_id)
    FIGURES["examples"] += 1
    FIGURES["acknowledged"] += len(results)
    FIGURES["untouched"] += len(untouched)
    FIGURES["kept"] += kept
    shutil.rmtree(root.parent)


# ---- (c) a torn tail is still cut ---------------------------------------------------------------

def test_torn_last_record_with_nothing_valid_after_it_is_cut(tmp_path):
    config = _sync_config(tmp_path / "store")
    results, _bodies = _write_store(config, 100)
    last = max(results, key=lambda r: r.log_position)
    segment = _segment_files(config.root_dir)[-1]
    offset = last.log_position - int(segment.name)
    data = bytearray(segment.read_bytes())
    data[offset + 100:] = bytes(len(data) - offset - 100)  # its tail never reached the disk
    segment.write_bytes(bytes(data))
    with MessageStore.open(config) as store:
        assert store.commit_log.max_position == last.log_position
        assert store.max_offset(TOPIC, last.queue_id) == last.queue_offset
    assert verify_store(config.root_dir) == []


# ---- (d) verify_store names the damage ----------------------------------------------------------

def test_verify_names_damage_in_an_old_segment_that_open_does_not_scan(tmp_path, caplog):
    """Clean close: open scans only the last three segments, so older damage is found by
    ``verify_store`` and by the read that reaches it (skipped with an alert, not stuck)."""
    config = _sync_config(tmp_path / "store")
    results, _bodies = _write_store(config, 400)
    segments = _segment_files(config.root_dir)
    victim = _record_in_segment(results, segments[1], 8192, 2)
    _flip_bit(segments[1], victim.log_position - int(segments[1].name) + 95)

    problems = verify_store(config.root_dir)
    assert any(p.startswith(f"commitlog/{segments[1].name} position={victim.log_position}: "
                            "mid-log corruption") for p in problems), problems
    assert not any("data after the end of the log" in p for p in problems), problems

    with MessageStore.open(config) as store, caplog.at_level(logging.ERROR):
        pulled, end = _pull_all(store, victim.queue_id)
        assert end == store.max_offset(TOPIC, victim.queue_id)
        assert len(pulled) == sum(1 for r in results if r.queue_id == victim.queue_id) - 1
        alerts = [m for m in caplog.messages if "[read] [corruption]" in m]
        assert len(alerts) == 1 and f"offset={victim.queue_offset}" in alerts[0]
        assert segments[1].name in alerts[0] and "postbox store repair" in alerts[0]
        with pytest.raises(CorruptionError, match=f"position={victim.log_position}"):
            store.read_message(victim.log_position)
    repair_store(config.root_dir)
    assert verify_store(config.root_dir) == []


def test_repair_of_an_intact_store_changes_nothing(tmp_path):
    config = _sync_config(tmp_path / "store")
    results, _bodies = _write_store(config, 120)
    before = _log_bytes(config.root_dir)
    report = repair_store(config.root_dir)
    assert report.set_aside == [] and report.valid_records == len(results)
    assert _log_bytes(config.root_dir) == before
    assert not (config.root_dir / "damaged").exists()
