"""``SendCoalescer``: concurrent sends share ``SendBatch`` calls of one topic, within the count
and byte limits, each sender getting its own outcome (the call is a function here: the wire is
covered by the remote transport tests)."""

from __future__ import annotations

import threading

import pytest

from network.grpc_v2.send_coalescer import SendCoalescer


class Calls:
    """A ``SendBatch`` that records its calls; the first one blocks until released."""

    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, headers: list[bytes], bodies: list[bytes]) -> list[object]:
        self.batches.append(list(headers))
        if len(self.batches) == 1:
            self.entered.set()
            assert self.release.wait(10)
        return [ValueError(f"refused {h.decode()}") if h.startswith(b"bad")
                else f"stored {h.decode()}" for h in headers]


def send_while_the_first_call_runs(coalescer: SendCoalescer, calls: Calls,
                                   sends: list[tuple[str, bytes, bytes]]) -> dict[bytes, object]:
    outcomes: dict[bytes, object] = {}

    def send(topic: str, header: bytes, body: bytes) -> None:
        try:
            outcomes[header] = coalescer.submit(topic, header, body)
        except ValueError as error:
            outcomes[header] = error

    first = threading.Thread(target=send, args=("t", b"first", b"x"))
    first.start()
    assert calls.entered.wait(10)
    threads = []
    for topic, header, body in sends:
        threads.append(threading.Thread(target=send, args=(topic, header, body)))
        threads[-1].start()
        while len(coalescer._calls._queue) < len(threads):  # queued behind the running call
            threading.Event().wait(0.001)
    calls.release.set()
    for thread in [first, *threads]:
        thread.join(10)
    return outcomes


def test_waiting_sends_go_in_calls_of_one_topic_each_with_its_own_outcome():
    calls = Calls()
    coalescer = SendCoalescer(calls)
    outcomes = send_while_the_first_call_runs(coalescer, calls, [
        ("t", b"m1", b"x"), ("t", b"bad2", b"x"), ("t", b"m3", b"x"), ("u", b"u1", b"x"),
        ("t", b"m4", b"x")])
    assert calls.batches == [[b"first"], [b"m1", b"bad2", b"m3"], [b"u1"], [b"m4"]]
    assert outcomes[b"m1"] == "stored m1" and outcomes[b"u1"] == "stored u1"
    assert isinstance(outcomes[b"bad2"], ValueError)  # only its own message failed


def test_a_call_holds_at_most_the_count_and_bytes_limits():
    calls = Calls()
    coalescer = SendCoalescer(calls, batch_count_max=2, batch_bytes_max=10)
    send_while_the_first_call_runs(coalescer, calls, [
        ("t", b"a", b"12345"), ("t", b"b", b"12345"), ("t", b"c", b"1"),  # count: 2 a call
        ("t", b"d", b"123456"), ("t", b"e", b"12345"),  # bytes: 11 > 10
        ("t", b"big", b"x" * 50)])  # larger than the limit: goes alone
    assert calls.batches == [[b"first"], [b"a", b"b"], [b"c", b"d"], [b"e"], [b"big"]]


def test_a_failed_call_fails_every_message_in_it():
    def broken(headers: list[bytes], bodies: list[bytes]) -> list[object]:
        raise ConnectionError("broker unreachable")

    with pytest.raises(ConnectionError, match="unreachable"):
        SendCoalescer(broken).submit("t", b"h", b"body")
