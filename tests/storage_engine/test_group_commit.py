"""``GroupCommit``: concurrent calls share rounds, each gets its own results or the error."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from postbox.storage_engine.group_commit import GroupCommit


def test_a_lone_call_runs_at_once_with_its_own_items():
    rounds: list[list[int]] = []

    def double(items: list[int]) -> list[int]:
        rounds.append(items)
        return [item * 2 for item in items]

    commit = GroupCommit(double)
    assert commit.run([1, 2, 3]) == [2, 4, 6]
    assert rounds == [[1, 2, 3]] and commit.rounds == 1


class FirstRoundBlocks:
    """A batch function that records its rounds; the first one blocks until ``release``."""

    def __init__(self, transform: Callable[[str], str] = str) -> None:
        self.rounds: list[list[str]] = []
        self.entered, self.release = threading.Event(), threading.Event()
        self.transform = transform

    def __call__(self, items: list[str]) -> list[str]:
        self.rounds.append(items)
        if len(self.rounds) == 1:
            self.entered.set()
            assert self.release.wait(10)
        return [self.transform(item) for item in items]


def test_threads_arriving_during_a_round_share_the_next_one():
    slow_first = FirstRoundBlocks(str.upper)
    entered, release, rounds = slow_first.entered, slow_first.release, slow_first.rounds
    commit = GroupCommit(slow_first)
    results: dict[str, list[str]] = {}

    def call(name: str, items: list[str]) -> None:
        results[name] = commit.run(items)

    leader = threading.Thread(target=call, args=("leader", ["a"]))
    leader.start()
    assert entered.wait(10)
    followers = [threading.Thread(target=call, args=(f"f{i}", [f"x{i}", f"y{i}"]))
                 for i in range(3)]
    for thread in followers:
        thread.start()
    while len(commit._queue) < 3:  # all three queued behind the running round
        threading.Event().wait(0.001)
    release.set()
    for thread in [leader, *followers]:
        thread.join(10)
    assert results == {"leader": ["A"], **{f"f{i}": [f"X{i}", f"Y{i}"] for i in range(3)}}
    assert len(rounds) == 2 and sorted(rounds[1]) == sorted(
        item for i in range(3) for item in (f"x{i}", f"y{i}"))


def test_every_caller_of_a_failed_round_gets_the_error_and_the_next_round_runs():
    calls = 0

    def flaky(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database unreachable")
        return items

    commit = GroupCommit(flaky)
    with pytest.raises(ConnectionError, match="unreachable"):
        commit.run([1])
    assert commit.run([2]) == [2]


def test_a_round_never_takes_more_than_max_items_but_never_splits_a_request():
    rounds: list[int] = []
    commit = GroupCommit(lambda items: rounds.append(len(items)) or items, max_items=2)
    assert commit.run([1, 2, 3]) == [1, 2, 3]  # larger than the limit: runs alone, whole
    assert rounds == [3]
    with pytest.raises(ValueError, match="max_items"):
        GroupCommit(lambda items: items, max_items=0)


def test_a_round_takes_queued_requests_while_joins_accepts_them():
    first_blocks = FirstRoundBlocks()
    # a round holds one letter only
    commit = GroupCommit(first_blocks, joins=lambda held, following: following[0][0] == held[0][0])
    leader = threading.Thread(target=commit.run, args=(["a0"],))
    leader.start()
    assert first_blocks.entered.wait(10)
    followers = []
    for item in ["a1", "a2", "b1", "a3"]:  # queued in this order behind the running round
        followers.append(threading.Thread(target=commit.run, args=([item],)))
        followers[-1].start()
        while len(commit._queue) < len(followers):
            threading.Event().wait(0.001)
    first_blocks.release.set()
    for thread in [leader, *followers]:
        thread.join(10)
    assert first_blocks.rounds == [["a0"], ["a1", "a2"], ["b1"], ["a3"]]  # runs from the head
    assert commit.rounds == 4
