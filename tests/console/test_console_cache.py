"""The console's kept figures (``Recent``) and shared store view (``Snapshots``): reused while
fresh, recomputed in the background once old, forgotten on a write."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from postbox.console import snapshots as snapshots_module
from postbox.console.cache import Recent
from postbox.console.snapshots import Snapshots


def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_recent_keeps_a_value_then_recomputes_it_in_the_background() -> None:
    recent = Recent(max_age_s=0.05)
    calls = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert recent.get("k", compute) == 1
    assert recent.get("k", compute) == 1  # fresh: kept
    time.sleep(0.1)
    assert recent.get("k", compute) == 1  # old: still answered, recomputed meanwhile
    wait_for(lambda: recent.get("k", compute) == 2)
    recent.clear()
    assert recent.get("k", compute) == 3  # after a write: computed now


def test_snapshots_share_one_view_reopen_it_when_old_and_drop_it_on_a_write(
        monkeypatch) -> None:
    monkeypatch.setattr(snapshots_module, "SHARED_OPEN_S", 0.0)  # every view is shared
    opened, closed = [], []

    @contextlib.contextmanager
    def opener(previous: int | None) -> Iterator[int]:
        opened.append(previous)
        number = len(opened)
        try:
            yield number
        finally:
            closed.append(number)

    snapshots = Snapshots(opener, max_age_s=0.05, errors=(OSError,))
    with snapshots.read() as first:
        assert first == 1
    with snapshots.read() as again:
        assert again == 1
    time.sleep(0.1)
    with snapshots.read() as old:
        assert old == 1
    wait_for(lambda: closed == [1])
    with snapshots.read() as fresh:
        assert fresh == 2
    snapshots.drop()
    assert closed == [1, 2]
    with snapshots.read() as after_write:
        assert after_write == 3
    snapshots.close()
    assert closed == [1, 2, 3]
    assert opened == [None, 1, None]  # a reopening is handed the view it replaces


def test_a_cheaper_reopening_does_not_make_a_slow_store_open_per_read(monkeypatch) -> None:
    """Whether views are shared is decided by the first opening's cost, not a reopening's
    (which may reuse what the previous view checked)."""
    monkeypatch.setattr(snapshots_module, "SHARED_OPEN_S", 0.05)
    opened: list[int | None] = []

    @contextlib.contextmanager
    def opener(previous: int | None) -> Iterator[int]:
        if previous is None:
            time.sleep(0.06)
        opened.append(previous)
        yield len(opened)

    def current() -> int:
        with snapshots.read() as view:
            return view

    snapshots = Snapshots(opener, max_age_s=1.0, errors=(OSError,))
    assert current() == 1
    time.sleep(1.1)  # older than the refresh (and ten times its opening)
    assert current() == 1  # answered by the old view while the new one opens
    wait_for(lambda: current() == 2)
    assert [current() for _ in range(3)] == [2, 2, 2]  # shared, not opened per read
    assert opened == [None, 1]
    snapshots.close()


def test_a_store_that_opens_quickly_is_opened_for_every_read() -> None:
    opened = []

    @contextlib.contextmanager
    def opener(previous: int | None) -> Iterator[int]:
        opened.append(1)
        yield len(opened)

    snapshots = Snapshots(opener, max_age_s=60.0, errors=(OSError,))
    for expected in (1, 2, 3):
        with snapshots.read() as view:
            assert view == expected
