"""``MessageStore.open(config, read_only=True)``: a view that writes nothing and stops at the last
complete record. (A live writer beside it is tested with a real process in
``tests/cli/test_live_inspection.py``.)"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from postbox.storage_engine import (
    CommitLogConfig,
    Message,
    MessageStore,
    NotAStoreError,
    StoreConfig,
)
from postbox.storage_engine.errors import StoreNotWritableError

SEGMENT_SIZE_BYTES = 8192


def files(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture
def config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(root_dir=tmp_path / "store",
                       commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))


def test_a_half_written_tail_record_is_not_part_of_the_view(config: StoreConfig) -> None:
    with MessageStore.open(config) as store:
        results = [store.put_message(Message("orders", f"m{n}".encode() * 20, keys=[f"k{n}"]))
                   for n in range(30)]
        end = store.commit_log.max_position
        last = store.read_message(results[-1].log_position)
        record = bytes(store.commit_log.segments.find(last.log_position).buffer[
            last.log_position % SEGMENT_SIZE_BYTES:][:last.store_size])
    # a fake of a writer caught mid-copy: the first 80% of a record after the last one
    segment = sorted((config.root_dir / "commitlog").iterdir())[-1]
    with segment.open("r+b") as handle:
        handle.seek(end % SEGMENT_SIZE_BYTES)
        handle.write(record[:len(record) * 4 // 5])
    before = files(config.root_dir)
    with MessageStore.open(config, read_only=True) as view:
        assert view.commit_log.max_position == end
        assert [m.body for m in view.iter_messages()] == [
            f"m{n}".encode() * 20 for n in range(30)]
        assert view.max_offset("orders", 0) == 30
        [found] = view.query_by_key("orders", "k29")
        assert found.log_position == results[-1].log_position
        with pytest.raises(StoreNotWritableError, match="read-only"):
            view.put_message(Message("orders", b"no"))
    assert files(config.root_dir) == before
    assert not (config.root_dir / "abort").exists()


def test_a_read_only_view_takes_no_lock(config: StoreConfig) -> None:
    with MessageStore.open(config) as store:
        store.put_message(Message("orders", b"one"))
    with MessageStore.open(config, read_only=True) as view, MessageStore.open(config) as store:
        store.put_message(Message("orders", b"two"))
        assert view.max_offset("orders", 0) == 1  # a snapshot of the moment it was opened
    with MessageStore.open(config, read_only=True) as view:
        assert view.max_offset("orders", 0) == 2


def test_a_directory_without_a_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreError):
        MessageStore.open(StoreConfig(root_dir=tmp_path / "nothing"), read_only=True)
    assert not (tmp_path / "nothing").exists()


def test_a_scan_in_windows_finds_what_the_whole_scan_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows far smaller than a segment, cutting records: the same view, and mid-log damage
    still refused."""
    from postbox.storage_engine.errors import MidLogCorruptionError
    from postbox.storage_engine.store import commit_log, read_only

    monkeypatch.setattr(commit_log, "SCAN_WINDOW_BYTES", 1000)
    monkeypatch.setattr(read_only, "SCAN_WINDOW_BYTES", 1000)
    config = StoreConfig(root_dir=tmp_path / "store",
                         commit_log=CommitLogConfig(segment_size_bytes=1 << 16))
    with MessageStore.open(config) as store:
        results = [store.put_message(Message("orders", f"m{n}".encode() * (n % 40 + 1)))
                   for n in range(400)]
        end = store.commit_log.max_position
    with MessageStore.open(config, read_only=True) as view:
        assert view.commit_log.max_position == end
        assert [m.body for m in view.iter_messages()] == [
            f"m{n}".encode() * (n % 40 + 1) for n in range(400)]
    damaged = results[len(results) // 2].log_position
    segment = sorted((config.root_dir / "commitlog").iterdir())[damaged >> 16]
    with segment.open("r+b") as handle:
        handle.seek(damaged % (1 << 16) + 4)
        handle.write(b"\0\0\0\0")  # the magic
    with pytest.raises(MidLogCorruptionError):
        MessageStore.open(config, read_only=True)


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_read_only_open_holds_a_window_of_the_log_not_the_log(tmp_path: Path) -> None:
    """The tail scan drops the pages behind it: the process's peak grows by far less than the
    log it scanned (the log's pages are in the page cache, where they count for nobody)."""
    segment_bytes = 64 << 20
    config = StoreConfig(root_dir=tmp_path / "store",
                         commit_log=CommitLogConfig(segment_size_bytes=segment_bytes))
    with MessageStore.open(config) as store:
        body = bytes(range(256)) * 256  # 64 KiB
        for _ in range(segment_bytes // len(body) - 8):
            store.put_message(Message("orders", body))
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:
        pytest.skip("cannot reset the peak resident size here")
    before = peak_rss_kib()
    with MessageStore.open(config, read_only=True) as view:
        assert view.commit_log.max_position > segment_bytes * 3 // 4
    assert peak_rss_kib() - before < 24 << 10


def test_a_view_opened_again_with_the_previous_tail_mark_scans_only_what_came_after(
        config: StoreConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    from postbox.storage_engine.errors import MidLogCorruptionError
    from postbox.storage_engine.store.commit_log import CommitLog

    starts: list[int] = []
    scan = CommitLog.scan_valid_end

    def spied(self: CommitLog, position: int, **options: bool) -> int:
        starts.append(position)
        return scan(self, position, **options)

    monkeypatch.setattr(CommitLog, "scan_valid_end", spied)
    with MessageStore.open(config) as store:
        for n in range(30):
            store.put_message(Message("orders", f"m{n}".encode() * 20))
    with MessageStore.open(config, read_only=True) as view:
        mark = view.tail_mark
    assert mark is not None and mark.end == view.commit_log.max_position
    with MessageStore.open(config) as store:
        for n in range(30, 40):
            store.put_message(Message("orders", f"m{n}".encode() * 20))
    starts.clear()
    with MessageStore.open(config, read_only=True, tail_mark=mark) as view:
        assert starts[0] == mark.end
        assert [m.body for m in view.iter_messages()] == [
            f"m{n}".encode() * 20 for n in range(40)]
        assert view.max_offset("orders", 0) == 40
    # a byte changed before the mark: the mark does not hold, the whole tail is scanned (and
    # the damage found, as without a mark)
    segment = sorted((config.root_dir / "commitlog").iterdir())[(mark.end - 1)
                                                                 // SEGMENT_SIZE_BYTES]
    with segment.open("r+b") as handle:
        handle.seek((mark.end - 10) % SEGMENT_SIZE_BYTES)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    starts.clear()
    with pytest.raises(MidLogCorruptionError):
        MessageStore.open(config, read_only=True, tail_mark=mark)
    assert starts[0] < mark.end
