"""``InFlightCalls``: the long calls a remote client has open, so that they can be cut short.

The embedded broker ends a long poll when its caller's ``cancel()`` turns true or when
``wake_waiters()`` is called; a remote call cannot carry a callable, so the client runs each
long call as a gRPC future and ``run`` watches it: it checks ``cancel()`` at least every
``CANCEL_CHECK_INTERVAL_MS`` and cancels the call (the server sees the cancellation and frees
its thread), and ``wake_all`` cancels every call open now. ``sleep`` is the interruptible
back-off a client uses when the server had no wait slot free.

Thread-safety: every method may be called from any thread. Nothing here survives a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import grpc

CANCEL_CHECK_INTERVAL_MS = 100


class InFlightCalls:
    """Open long calls, cancellable together."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._calls: set[grpc.Future] = set()
        self._generation = 0  # bumped by wake_all

    def run(self, future: grpc.Future, cancel: Callable[[], bool] | None = None) -> bytes | None:
        """The call's response, or None when ``cancel()`` or ``wake_all`` ended it first.

        Raises:
            grpc.RpcError: the call failed.
        """
        done = threading.Event()
        with self._condition:
            generation = self._generation
            self._calls.add(future)
        future.add_done_callback(lambda _: done.set())
        try:
            while not done.wait(CANCEL_CHECK_INTERVAL_MS / 1000 if cancel else None):
                if cancel is not None and cancel():
                    future.cancel()
                    return None
            if future.cancelled():
                return None
            return future.result()
        except grpc.FutureCancelledError:
            return None
        except grpc.RpcError as error:
            if error.code() is grpc.StatusCode.CANCELLED and self._woken_since(generation):
                return None
            raise
        finally:
            with self._condition:
                self._calls.discard(future)

    def sleep(self, seconds: float, cancel: Callable[[], bool] | None = None) -> None:
        """Wait ``seconds``, or less when ``cancel()`` turns true or ``wake_all`` is called."""
        with self._condition:
            generation = self._generation
            remaining_s = seconds
            step_s = CANCEL_CHECK_INTERVAL_MS / 1000
            while remaining_s > 0 and generation == self._generation:
                if cancel is not None and cancel():
                    return
                self._condition.wait(min(remaining_s, step_s))
                remaining_s -= step_s

    def wake_all(self) -> None:
        """Cancel every open call and end every ``sleep``."""
        with self._condition:
            self._generation += 1
            calls = list(self._calls)
            self._condition.notify_all()
        for call in calls:
            call.cancel()

    def _woken_since(self, generation: int) -> bool:
        with self._condition:
            return self._generation != generation


__all__ = ["InFlightCalls"]
