"""``read_until_stopped``: the requests of a client stream, ended early when the server stops.

A handler that iterates a gRPC request iterator blocks until the client sends or closes, so a
long-lived stream (a client's Telemetry stream lasts as long as the client) would hold server
shutdown for the whole grace period. Here a reader thread moves the requests into a bounded
queue and the handler waits on that queue, checking the server's ``stopping`` event at least
every ``STOP_CHECK_S``; when it returns, grpc completes the call, which also ends the reader
thread (its iterator stops or raises). The reader is a daemon thread that touches no storage.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

STOP_CHECK_S = 0.25
QUEUE_LENGTH_MAX = 16
"""Requests read ahead of the handler (the reader waits when the handler falls behind)."""

RequestT = TypeVar("RequestT")
_END = object()


def read_until_stopped(requests: Iterable[RequestT], stopping: threading.Event
                       ) -> Iterator[RequestT]:
    """Yield ``requests`` until the client ends the stream or ``stopping`` is set."""
    pending: queue.Queue = queue.Queue(QUEUE_LENGTH_MAX)

    def read() -> None:
        try:
            for request in requests:
                pending.put(request)
        except Exception:  # grpc.RpcError when the call is cancelled: the stream is over
            pass
        finally:
            pending.put(_END)

    threading.Thread(target=read, name="postbox-stream-reader", daemon=True).start()
    while not stopping.is_set():
        try:
            request = pending.get(timeout=STOP_CHECK_S)
        except queue.Empty:
            continue
        if request is _END:
            return
        yield request


__all__ = ["read_until_stopped"]
