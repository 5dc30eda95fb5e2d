"""Retention: expired commit-log segments go at the deletion hour or under disk pressure, the
consume queues and key index follow the new minimum position; under pressure only segments every
group has consumed past go (unless forced cleaning is enabled), and at the warning watermark the
store refuses writes (reads keep working) until space is freed.

Time and disk usage are injected (a fake clock, file mtimes set with ``os.utime``, a probe
returning a chosen ratio); the real probe and a real full disk are in ``test_disk_space.py``.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from postbox.storage_engine import (
    DiskFullError,
    GetStatus,
    Message,
    MessageStore,
    RetentionConfig,
)
from postbox.storage_engine.store.retention import disk_used_ratio
from tests.storage_engine.conftest import DiskProbe, put_all, read_queue, small_config

TOPIC = "orders"
HOUR_MS = 3_600_000


@pytest.fixture
def retained(open_store, tmp_path, clock):
    """Factory for a tiny store with an injected hour of day and disk probe; closed and
    verified after the test."""

    def factory(*, hour: int = 12, probe: DiskProbe | None = None, **retention) -> MessageStore:
        config = small_config(tmp_path / "store", retention=RetentionConfig(**retention))
        return open_store(config, clock=clock, disk_usage=probe or DiskProbe(),
                          hour_of_day=lambda _now_ms: hour)

    return factory


def _fill(store: MessageStore, count: int = 400) -> list:
    """Keyed messages over many tiny segments, dispatched and flushed (retention deletes only
    segments that are both)."""
    messages = [Message(TOPIC, b"r%05d-" % i + bytes(150), keys=[f"k{i}"]) for i in range(count)]
    results = put_all(store, messages)
    store.log_flusher.flush(0)
    return results


def _age(store: MessageStore, segment_indexes, hours: float, clock) -> None:
    """Set the mtime of some commit-log segments ``hours`` before the fake clock's now."""
    when = clock.now_ms() / 1000 - hours * 3600
    for index in segment_indexes:
        os.utime(store.commit_log.segments.segments[index].path, (when, when))


def _segment_names(store: MessageStore) -> list[str]:
    return sorted(p.name for p in (store.root_dir / "commitlog").iterdir())


def test_expired_segments_are_deleted_at_the_deletion_hour_ten_at_most(retained, clock):
    store = retained(hour=4, file_reserved_hours=72)
    results = _fill(store)
    count = len(store.commit_log.segments.segments)
    assert count > 12
    _age(store, range(count), 73, clock)  # every segment expired, the last one too
    assert store.retention.run_once(clock.now_ms()) == 10
    assert store.retention.run_once(clock.now_ms()) == count - 11  # never the last segment
    assert store.retention.run_once(clock.now_ms()) == 0
    assert len(_segment_names(store)) == 1
    log_min = store.commit_log.min_position
    survivors = [r for r in results if r.log_position >= log_min]
    assert [v.log_position for v in read_queue(store, TOPIC)] == [
        r.log_position for r in survivors]
    assert store.min_offset(TOPIC, 0) == survivors[0].queue_offset
    gone = store.get_message("g", TOPIC, 0, 0)
    assert gone.status is GetStatus.OFFSET_TOO_SMALL
    assert gone.next_offset == survivors[0].queue_offset
    assert store.query_by_key(TOPIC, "k0") == []
    assert [v.log_position for v in store.query_by_key(TOPIC, f"k{survivors[0].queue_offset}")
            ] == [survivors[0].log_position]
    queue_files = sorted((store.root_dir / "consumequeue" / TOPIC / "0").iterdir())
    assert int(queue_files[0].name) // 20 <= survivors[0].queue_offset
    assert store.stats()["retention"]["deleted_segment_count"] == count - 1


def test_nothing_is_deleted_outside_the_deletion_hour_or_before_expiry(retained, clock):
    store = retained(hour=12, delete_when="04;16")
    _fill(store)
    count = len(store.commit_log.segments.segments)
    _age(store, range(count), 73, clock)
    assert store.retention.run_once(clock.now_ms()) == 0  # 12 h is not a deletion hour
    assert len(_segment_names(store)) == count


def test_deletion_stops_at_the_first_segment_that_must_stay(retained, clock):
    """Segments 0–2 expired, 3 fresh, 4+ expired: only 0–2 go (no holes in the log)."""
    store = retained(hour=4)
    _fill(store)
    count = len(store.commit_log.segments.segments)
    _age(store, [0, 1, 2], 100, clock)
    _age(store, range(4, count), 100, clock)
    names = _segment_names(store)
    assert store.retention.run_once(clock.now_ms()) == 3
    assert _segment_names(store) == names[3:]


def test_used_space_above_the_max_ratio_deletes_expired_files_outside_the_hours(retained,
                                                                                clock):
    probe = DiskProbe()
    store = retained(hour=12, probe=probe)
    _fill(store)
    probe.ratio = 0.80
    _age(store, [0, 1], 80, clock)
    assert store.retention.run_once(clock.now_ms()) == 2


def test_above_the_forcibly_ratio_only_segments_every_group_consumed_are_deleted(retained,
                                                                                 clock):
    """Pressure deletes unexpired segments only up to the consumption floor; without one
    (no owner told the store what was consumed) it deletes nothing unexpired."""
    probe = DiskProbe()
    store = retained(hour=12, probe=probe)
    results = _fill(store)
    probe.ratio = 0.86
    names = _segment_names(store)
    assert store.retention.run_once(clock.now_ms()) == 0
    assert store.retention.kept_unconsumed and _segment_names(store) == names
    floor = results[150].log_position  # every group consumed the first 150 messages
    store.set_consumption_floor(lambda: floor)
    deleted = store.retention.run_once(clock.now_ms())
    assert 0 < deleted < len(names) - 1
    assert store.commit_log.min_position <= floor  # nothing at or after the floor went
    assert store.commit_log.min_position > floor - store.config.commit_log.segment_size_bytes
    assert store.retention.kept_unconsumed
    assert [v.log_position for v in read_queue(store, TOPIC)][-250:] == [
        r.log_position for r in results[150:]]
    store.put_message(Message(TOPIC, b"still writable"), 0)


def test_forced_cleaning_deletes_unconsumed_segments_only_when_enabled(retained, clock):
    """RocketMQ's forced clean (``cleanFileForciblyEnable``) stays available, explicitly."""
    probe = DiskProbe()
    store = retained(hour=12, probe=probe, clean_file_forcibly_enable=True)
    _fill(store)
    probe.ratio = 0.86
    count = len(store.commit_log.segments.segments)
    assert store.retention.run_once(clock.now_ms()) == min(10, count - 1)
    assert not store.retention.disk_full


def test_puts_measure_the_disk_every_interval_and_every_n_bytes(retained, clock):
    """The watermark is not left to the 10 s retention run: a put measures again once
    ``disk_check_interval_ms`` passed or ``disk_check_bytes`` were accepted since."""
    probe = DiskProbe()
    store = retained(hour=12, probe=probe, disk_check_interval_ms=100,
                     disk_check_bytes=4096)
    store.put_message(Message(TOPIC, b"measured"), 0)
    probe.ratio = 0.91
    store.put_message(Message(TOPIC, b"a" * 100), 0)  # measured just now: accepted
    clock.advance(100)
    with pytest.raises(DiskFullError, match="disk_space_warning_level_ratio") as refused:
        store.put_message(Message(TOPIC, b"after 100 ms"), 0)
    assert refused.value.setting == "retention.disk_space_warning_level_ratio"
    probe.ratio = 0.50
    clock.advance(100)
    store.put_message(Message(TOPIC, b"accepted again"), 0)
    probe.ratio = 0.91
    with pytest.raises(DiskFullError):  # no time passed, but 4 KiB were accepted since
        for _ in range(10):
            store.put_message(Message(TOPIC, bytes(1000)), 0)
    retention = store.stats()["retention"]
    assert retention["writes_refused"] == 2
    assert "disk 91% used" in retention["last_refusal"]


def test_above_the_warning_ratio_writes_are_refused_until_space_is_freed(retained, clock):
    probe = DiskProbe()
    store = retained(hour=12, probe=probe)
    results = _fill(store, 50)
    probe.ratio = 0.93
    store.retention.run_once(clock.now_ms())
    assert store.retention.disk_full
    with pytest.raises(DiskFullError, match="disk_space_warning_level_ratio"):
        store.put_message(Message(TOPIC, b"refused"), 0)
    with pytest.raises(DiskFullError):
        store.put_messages([Message(TOPIC, b"refused")], 0)
    survivors = [r for r in results if r.log_position >= store.commit_log.min_position]
    assert [v.log_position for v in read_queue(store, TOPIC)] == [
        r.log_position for r in survivors]
    probe.ratio = 0.50
    store.retention.run_once(clock.now_ms())
    assert not store.retention.disk_full
    (accepted,) = put_all(store, [Message(TOPIC, b"accepted")])
    assert accepted.queue_offset == len(results)


def test_unflushed_or_undispatched_segments_are_never_deleted(retained, clock):
    probe = DiskProbe()
    store = retained(hour=4, probe=probe)
    _fill(store, 100)
    store.dispatch.stop()
    store.put_messages([Message(TOPIC, bytes(300)) for _ in range(60)], 0)  # new segments
    store.log_flusher.flush(0)
    probe.ratio = 0.93
    undispatched_from = store.dispatch.position
    store.retention.run_once(clock.now_ms())
    assert store.commit_log.min_position <= undispatched_from
    store.dispatch.start()
    assert store.wait_dispatched()


def test_disk_used_ratio_is_what_df_shows(tmp_path):
    """RocketMQ 5's formula is ``df``'s ``Use%``: blocks reserved for root count on neither
    side (counting them as used once made a roomy CI disk look 80 % full and deleted fresh
    segments). Both round up to a whole percent; one point of slack for concurrent writers."""
    ratio = disk_used_ratio(tmp_path)
    shown = subprocess.run(["df", "--output=pcent", str(tmp_path)], capture_output=True,
                           text=True, check=True).stdout.splitlines()[-1]
    assert abs(ratio * 100 - int(shown.strip().rstrip("%"))) <= 1
    assert abs(ratio * 100 - round(ratio * 100)) < 1e-9
