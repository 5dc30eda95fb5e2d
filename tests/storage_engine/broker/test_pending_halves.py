"""``PendingHalves``, the pending-transaction table the check service reads: any sequence of
sends, replacements (check copies), ends and check passes answers exactly what a plain scan of
the table answers, and its heaps stay bounded however many transactions end behind an old
pending one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.storage_engine.broker.pending_halves import PendingHalf, PendingHalves

KEYS = st.sampled_from([f"tx-{n}" for n in range(12)])
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, st.integers(0, 50), st.integers(0, 40)),
    st.tuples(st.just("end"), KEYS),
    st.tuples(st.just("due"), st.integers(0, 60), st.integers(1, 5)),
), max_size=80)


def _scan_due(halves: list[PendingHalf], now_ms: int, limit: int) -> list[tuple[int, int]]:
    due = sorted((half.due_ms, half.log_position) for half in halves if half.due_ms <= now_ms)
    return due[:limit]


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_answers_as_a_scan_of_the_table(operations) -> None:
    table = PendingHalves()
    model: dict[str, PendingHalf] = {}
    position = 0
    for operation in operations:
        if operation[0] == "put":  # a half, or a check's copy of it (a later position)
            _, key, due_ms, queue_offset = operation
            position += 1
            half = PendingHalf(queue_offset, position, key, "group", due_ms, 0)
            table.put(half)
            model[key] = half
        elif operation[0] == "end" and operation[1] in model:
            table.remove(model.pop(operation[1]))
        elif operation[0] == "due":
            _, now_ms, limit = operation
            found = table.due(now_ms, limit)
            assert [(h.due_ms, h.log_position) for h in found] == _scan_due(
                list(model.values()), now_ms, limit)
        halves = list(model.values())
        assert len(table) == len(halves)
        assert sorted(h.log_position for h in table) == sorted(h.log_position for h in halves)
        assert table.next_due_ms() == min((h.due_ms for h in halves), default=None)
        assert table.lowest_queue_offset() == min((h.queue_offset for h in halves),
                                                  default=None)
        for key, half in model.items():
            assert table.of_key(key) is half and table.at(half.log_position) is half


def test_a_copy_replaces_its_transaction_and_the_old_position_is_gone() -> None:
    table = PendingHalves()
    first = PendingHalf(0, 100, "tx", "group", 5_000, 0)
    table.put(first)
    copy = PendingHalf(7, 900, "tx", "group", 35_000, 1)
    table.put(copy)
    assert len(table) == 1 and table.at(100) is None and table.of_key("tx") is copy
    assert table.due(10_000, 10) == []  # the first copy's due time went with it
    assert table.next_due_ms() == 35_000 and table.lowest_queue_offset() == 7


def test_heaps_stay_bounded_behind_an_old_pending_half() -> None:
    table = PendingHalves()
    table.put(PendingHalf(0, 0, "old", "group", 1, 0))  # never ends, always on top
    for n in range(1, 50_000):
        half = PendingHalf(n, n, f"tx-{n}", "group", 10 + n, 0)
        table.put(half)
        table.remove(half)
        assert table.lowest_queue_offset() == 0
    assert len(table) == 1
    assert len(table._due) + len(table._offsets) <= 4 + 1024 + 2
    assert [half.key for half in table.due(10**9, 10)] == ["old"]
