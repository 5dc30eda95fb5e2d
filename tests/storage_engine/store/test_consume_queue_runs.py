"""``ConsumeQueue.append_run`` writes exactly what ``append`` writes unit by unit.

Dispatch hands each queue its units a run at a time; a run already present (re-dispatch after
recovery) is checked with one read and a run that continues the queue is written with one
write, and everything else goes unit by unit. Random sequences of runs over one log (in order,
again, overlapping, skipping ahead into a gap, across file boundaries, with units torn in
between) must leave byte-identical files, and return what the unit-by-unit appends report.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.storage_engine.store.consume_queue import UNIT, ConsumeQueue
from postbox.storage_engine.store.open_files import OpenFiles

UNITS_PER_FILE = 8
RECORDS = 40


def log_units(sizes: list[int], tags: list[int]) -> list[tuple[int, int, int, int]]:
    """``(log position, size, tag hash, queue offset)`` of consecutive records of one queue."""
    units, position = [], 0
    for offset, (size, tag) in enumerate(zip(sizes, tags, strict=True)):
        units.append((position, size, tag, offset))
        position += size + 7  # other queues' records lie between
    return units


def unit_by_unit(queue: ConsumeQueue, units) -> int:
    written = 0
    for log_position, size, tag, offset in units:
        if queue.append(log_position, size, tag, offset):
            written = offset + 1
    return written


def queue_files(queue: ConsumeQueue) -> dict[str, bytes]:
    for segment in queue.segments.segments:
        segment.flush()
    return {path.name: path.read_bytes() for path in sorted(queue.segments.directory.iterdir())}


def tear(queue: ConsumeQueue, offset: int, value: int) -> None:
    """Overwrite the unit at ``offset`` (when written) as a power loss might have."""
    segment = queue.segments.find(offset * UNIT)
    if segment is not None and offset * UNIT < segment.end_position:
        segment.write_at(offset * UNIT - segment.base_position,
                         value.to_bytes(8, "big") + bytes(12))


STEP = st.tuples(st.integers(0, RECORDS - 1), st.integers(1, 12),
                 st.one_of(st.none(), st.tuples(st.integers(0, RECORDS - 1),
                                                st.integers(1, 1 << 40))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 5000), min_size=RECORDS, max_size=RECORDS),
       tags=st.lists(st.integers(-(1 << 40), 1 << 40), min_size=RECORDS, max_size=RECORDS),
       steps=st.lists(STEP, min_size=1, max_size=8), files_max=st.sampled_from([None, 2]))
def test_runs_write_what_unit_by_unit_appends_write(sizes, tags, steps, files_max) -> None:
    units = log_units(sizes, tags)
    with tempfile.TemporaryDirectory() as directory:
        queues = [ConsumeQueue(Path(directory) / name, "T", 0, UNITS_PER_FILE,
                               None if files_max is None else OpenFiles(files_max))
                  for name in ("runs", "units")]
        runs, reference = queues
        for start, length, torn in steps:
            if torn is not None:
                for queue in queues:
                    tear(queue, *torn)
            window = units[start:start + length]
            assert runs.append_run(window) == unit_by_unit(reference, window)
            assert queue_files(runs) == queue_files(reference)
            assert (runs.max_offset, runs.max_log_end) == (reference.max_offset,
                                                           reference.max_log_end)


def test_a_run_present_is_left_alone_and_a_new_run_is_one_write(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path / "q", "T", 0, UNITS_PER_FILE)
    units = log_units([100] * 6, [5] * 6)
    assert queue.append_run(units[:3]) == 3
    assert queue.append_run(units[:3]) == 0  # re-dispatch: present, nothing written
    assert queue.append_run(units[2:6]) == 6  # overlaps: unit by unit, the new ones written
    assert queue.read_units(0, 10) == [unit[:3] for unit in units]
