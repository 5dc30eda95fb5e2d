"""``EventLoopThread``: one asyncio event loop in a daemon thread, for ``async def`` handlers.

A ``Consumer`` whose group has an async handler owns one (started with the consumer, or on the
first ``run`` for a middleware's one-off async work). Consume threads stay in charge of
everything else — pulls, send-backs, offsets, the sync middleware hooks — and hand the loop one
coroutine per handler call with ``run``, which blocks the calling thread until the coroutine
finished and returns its result or raises its exception. So every retry, dead-letter, orderly
and offset rule of the threaded engine applies unchanged, and nothing blocking runs on the loop
unless a handler does it itself (async handlers must not block: they would stall every other
coroutine of the consumer).

Context: the coroutine runs as a task in a *copy of the calling thread's contextvars*, so a
value a middleware set in the consume thread (a tracing span, a request id) is current inside
the coroutine; changes the coroutine makes stay in its copy.

Concurrency: coroutines in flight are at most the consumer's consume threads (each waits for its
own); ``semaphore(key, size)`` gives a per-handler bound below that (``max_concurrency``).

Shutdown (``cancel_in_flight`` then ``stop``): the consumer first lets the consume threads drain
(``drain_timeout_ms``); coroutines still running then are cancelled and their ``run`` raises
``CoroutineCancelledError``, which the consume service treats as "not consumed": the message is
neither committed nor sent back, so it is delivered again after restart. ``stop`` then gives
cancelled coroutines ``stop_timeout_ms`` to unwind, closes the loop and releases every caller
still waiting (a coroutine that ignores cancellation, or blocks the loop, cannot hang the
shutdown; a blocked loop thread is left behind as a daemon). A crash loses only the loop's
in-memory tasks: their messages were never committed, so they are delivered again. Thread
safety: ``run``, ``cancel_in_flight`` and ``stop`` may be called from any
thread but the loop's own (``run`` there raises ``EventLoopError`` instead of deadlocking).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from .errors import FrameworkError

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_TIMEOUT_MS_DEFAULT = 5_000


class EventLoopError(FrameworkError):
    """The event loop cannot run the coroutine (called from the loop thread, or stopped)."""


class CoroutineCancelledError(FrameworkError):
    """The coroutine was cancelled before it finished (the consumer stopped past its drain
    timeout, or the coroutine was cancelled by other code); its message was not consumed."""


class EventLoopThread:
    """An asyncio loop running in its own daemon thread, started lazily."""

    def __init__(self, name: str, *, stop_timeout_ms: int = STOP_TIMEOUT_MS_DEFAULT) -> None:
        self.name = name
        self.stop_timeout_ms = stop_timeout_ms
        """How long ``stop`` waits for cancelled coroutines to unwind (and as long again for
        the loop thread to end)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()  # touched on the loop thread only
        self._semaphores: dict[Hashable, asyncio.Semaphore] = {}  # loop thread only
        self._waiting: set[concurrent.futures.Future[Any]] = set()  # callers of run
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def running(self) -> bool:
        """Whether the loop thread is running."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (started on first use)."""
        return self.start()

    def in_loop_thread(self) -> bool:
        """Whether the caller runs on this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def start(self) -> asyncio.AbstractEventLoop:
        """Start the loop thread if it is not running; returns the loop."""
        with self._lock:
            if self._stopped:
                raise EventLoopError(f"event loop {self.name!r} is stopped")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(loop, ready),
                                          name=f"postbox-loop-{self.name}", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            asyncio.set_event_loop(None)

    def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        """Run ``factory()``'s coroutine on the loop, in a copy of the caller's contextvars,
        and wait for it: returns its result or raises its exception.

        Raises:
            EventLoopError: called from the loop thread itself (it would wait for itself), or
                the loop is stopped; ``factory`` was not called.
            CoroutineCancelledError: the coroutine was cancelled (consumer shutdown).
        """
        if self.in_loop_thread():
            raise EventLoopError(
                f"EventLoopThread.run called from the event loop thread of {self.name!r}: it "
                "would block the loop waiting for itself; inside a coroutine, await instead")
        loop = self.start()
        context = contextvars.copy_context()
        awaitable = factory()
        if not inspect.isawaitable(awaitable):
            raise EventLoopError(f"{factory!r} returned {type(awaitable).__name__}, not an "
                                 "awaitable")
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._waiting.add(done)
        try:
            loop.call_soon_threadsafe(self._begin, awaitable, context, done)
        except RuntimeError as error:  # the loop closed meanwhile
            _close(awaitable)
            raise EventLoopError(f"event loop {self.name!r} is stopped") from error
        try:
            return done.result()
        except concurrent.futures.CancelledError:
            raise CoroutineCancelledError(
                f"a coroutine on event loop {self.name!r} was cancelled before it "
                "finished") from None
        finally:
            with self._lock:
                self._waiting.discard(done)

    def _begin(self, awaitable: Awaitable[T], context: contextvars.Context,
               done: concurrent.futures.Future[T]) -> None:
        """On the loop: start the task in ``context`` and report its end to ``done``."""
        if self._stopped:  # came in after the shutdown collected the tasks
            _close(awaitable)
            done.cancel()
            return
        coroutine = awaitable if inspect.iscoroutine(awaitable) else _awaiting(awaitable)
        task = asyncio.get_running_loop().create_task(coroutine, context=context)
        self._tasks.add(task)

        def finished(task: asyncio.Task[T]) -> None:
            self._tasks.discard(task)
            try:
                if task.cancelled():
                    done.cancel()
                elif (error := task.exception()) is not None:
                    done.set_exception(error)
                else:
                    done.set_result(task.result())
            except concurrent.futures.InvalidStateError:  # released by stop() already
                pass

        task.add_done_callback(finished)

    def semaphore(self, key: Hashable, size: int) -> asyncio.Semaphore:
        """The loop's semaphore for ``key`` (made with ``size`` on first use); call it on the
        loop thread only."""
        semaphore = self._semaphores.get(key)
        if semaphore is None:
            semaphore = self._semaphores[key] = asyncio.Semaphore(size)
        return semaphore

    def in_flight(self) -> int:
        """Coroutines started by ``run`` and not finished (a snapshot)."""
        return len(self._tasks)

    def cancel_in_flight(self) -> None:
        """Cancel every coroutine started by ``run`` that is still running; their callers get
        ``CoroutineCancelledError``."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def cancel() -> None:
            for task in list(self._tasks):
                task.cancel()

        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # closed meanwhile: nothing left to cancel
            return

    def stop(self) -> None:
        """Cancel what still runs, let it unwind, stop and close the loop. Idempotent."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        if self.in_loop_thread():
            raise EventLoopError(f"EventLoopThread.stop called from the loop thread of "
                                 f"{self.name!r}")
        timeout_s = self.stop_timeout_ms / 1000
        future = asyncio.run_coroutine_threadsafe(self._shutdown(timeout_s), loop)
        try:
            future.result(timeout_s * 2)
        except Exception:  # a coroutine refused to end: the daemon thread is left behind
            log.exception("[event-loop] %s did not shut down cleanly", self.name)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        with self._lock:
            stranded = list(self._waiting)
        for done in stranded:  # scheduled as the loop stopped: never started
            done.cancel()
        if thread.is_alive():
            log.warning("[event-loop] %s: the loop thread is still busy; leaving it (daemon)",
                        self.name)
            return
        loop.close()

    async def _shutdown(self, timeout_s: float) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        loop = asyncio.get_running_loop()
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()


async def _awaiting(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _close(awaitable: Awaitable[Any]) -> None:
    """Close a coroutine that will never run (no "never awaited" warning)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


def is_coroutine_callable(function: object) -> bool:
    """Whether calling ``function`` gives a coroutine: an ``async def`` function or method, a
    ``functools.partial`` of one, or an object whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(function):  # unwraps functools.partial
        return True
    if inspect.isroutine(function) or inspect.isclass(function):
        return False
    return inspect.iscoroutinefunction(type(function).__call__)
