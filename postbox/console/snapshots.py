"""One read-only view of the store, shared by the console's reads and opened again in the
background once it is older than the refresh interval.

Opening a store read-only checks the tail of its commit log record by record (CRCs included),
which takes seconds on a store of a million messages: opened per request, every page would
take that long. The console keeps the last view and answers from it; a view older than
``max_age_s`` (the refresh interval, or ``REOPEN_FACTOR`` times the last opening's duration when
that is longer, so reopening never takes most of the process's time) is replaced by a new one
opened in a background thread, and the old one is closed once no read uses it. A store that
opens in under ``SHARED_OPEN_S`` is opened afresh for every read, as the command line does.
The first read opens synchronously, and so does the first read after ``drop`` (the console
drops the view before each write, so the page it returns to shows the write).

Reads of one view are serialised (one page at a time reads the store), which keeps a view's
users and its closing apart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

log = logging.getLogger(__name__)

REOPEN_FACTOR = 10.0
SHARED_OPEN_S = 1.0
"""A view whose opening took less than this is opened afresh for every read (always current);
only a slower one is shared."""


Opener = Callable[[Any | None], ContextManager[Any]]
"""Opens a view: called with the broker of the view it replaces (None for a first view)."""


class View:
    """One opened store: the broker over it, when it was opened, and its read lock.

    ``open_s`` is how long this opening took; ``first_open_s`` how long the opening without a
    previous view took (a reopening may reuse what the previous view checked, and is cheaper:
    whether views are shared at all is decided on the full cost)."""

    def __init__(self, opener: Opener, previous: View | None = None) -> None:
        started = time.monotonic()
        self._stack = contextlib.ExitStack()
        self.broker: Any = self._stack.enter_context(opener(
            None if previous is None else previous.broker))
        self.opened_at = time.monotonic()
        self.open_s = self.opened_at - started
        self.first_open_s: float = self.open_s if previous is None else previous.first_open_s
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """Close once the read in progress (if any) is done."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self._stack.close()


class Snapshots:
    """The shared read-only view of one store (see the module's doc)."""

    def __init__(self, opener: Opener, max_age_s: float,
                 errors: tuple[type[BaseException], ...],
                 after_read: Callable[[Any], None] | None = None) -> None:
        self._opener = opener
        self._after_read = after_read
        """Called with the view's broker after each read of a shared view (the console drops
        the store pages the read mapped, so a view's reads do not pile them up)."""
        self._max_age_s = max_age_s
        self._errors = errors
        self._lock = threading.Lock()
        self._view: View | None = None
        self._refreshing = False
        self._generation = 0
        """Counts ``drop`` calls: a background view opened before one is not used."""

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        """The current view's broker, for one read (a new view when there is none)."""
        while True:
            view = self._current()
            with view.lock:
                if view.closed:
                    continue  # replaced and closed meanwhile: take the newer one
                try:
                    yield view.broker
                finally:
                    if self._after_read is not None:
                        self._after_read(view.broker)
                return

    def _current(self) -> View:
        replaced = None
        with self._lock:
            view = self._view
            if view is not None and view.first_open_s < SHARED_OPEN_S:
                replaced, view = view, None  # cheap to open: a current view for every read
            if view is None:
                view = self._view = View(self._opener)
            elif not self._refreshing and time.monotonic() - view.opened_at > max(
                    self._max_age_s, REOPEN_FACTOR * view.open_s):
                self._refreshing = True
                threading.Thread(target=self._reopen, args=(view, self._generation),
                                 name="postbox-console-reopen", daemon=True).start()
        if replaced is not None:
            replaced.close()
        return view

    def _reopen(self, previous: View, generation: int) -> None:
        try:
            fresh: View | None = View(self._opener, previous)
        except self._errors as error:  # the older view stays; a later read tries again
            log.warning("reopening the store for the console failed: %s", error)
            fresh = None
        with self._lock:
            self._refreshing = False
            if fresh is None or generation != self._generation:
                old = fresh  # failed, or opened before a write: not used
            else:
                old, self._view = self._view, fresh
        if old is not None:
            old.close()

    def drop(self) -> None:
        """Close the view (before a write); the next read opens a new one."""
        with self._lock:
            old, self._view = self._view, None
            self._generation += 1
        if old is not None:
            old.close()

    def close(self) -> None:
        """Close the view for good (the console stops)."""
        self.drop()
