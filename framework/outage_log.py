"""``OutageLog``: what a consumer logs while its broker is unreachable — once, not every retry.

During an outage the consumer's housekeeping (rebalance, heartbeat, offset persistence) and its
pull loop fail every few hundred milliseconds, each with the same ``BrokerUnavailableError``.
The first failure is one WARNING naming the consumer, its group, what failed and the error
(no traceback: the error says it all, and the consumer retries by itself); later failures are
DEBUG; the first success afterwards is one INFO line with how long the outage lasted. Anything
that is not ``BrokerUnavailableError`` is not an outage and is raised to the caller (the
scheduler logs it with its traceback).

Thread-safe: the pull thread and the scheduler thread report to one instance.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from postbox.storage_engine import BrokerUnavailableError, Clock

log = logging.getLogger("postbox.framework.consumer")


class OutageLog:
    """The outage state of one consumer (``subject``: ``client_id in group``), kept per kind of
    call (``what``: "rebalance", "heartbeat", "pull"), so that one kind still answering (pulls
    from cached routes while the name server is down) does not end another's outage: the
    WARNING comes when the first kind starts failing, the INFO when the last one recovers."""

    def __init__(self, subject: str, clock: Clock) -> None:
        self.subject = subject
        self._clock = clock
        self._lock = threading.Lock()
        self._failing: dict[str, int] = {}  # what -> failures since it last succeeded
        self._since_ms = 0

    @property
    def unreachable(self) -> bool:
        """Whether some kind of call is failing."""
        with self._lock:
            return bool(self._failing)

    def failures(self, what: str) -> int:
        """How often ``what`` failed since it last succeeded."""
        with self._lock:
            return self._failing.get(what, 0)

    def failed(self, what: str, error: BrokerUnavailableError, retry_ms: int) -> None:
        """Report that ``what`` failed because the broker is unreachable."""
        with self._lock:
            first = not self._failing
            if first:
                self._since_ms = self._clock.now_ms()
            self._failing[what] = self._failing.get(what, 0) + 1
        if first:
            log.warning("[outage] %s: %s failed, the broker is unreachable (%s); the consumer "
                        "retries every %d ms and logs again when it answers", self.subject,
                        what, error, retry_ms)
        else:
            log.debug("[outage] %s: %s failed again (%s)", self.subject, what, error)

    def succeeded(self, what: str) -> None:
        """Report that ``what`` reached the broker (the outage ends when nothing fails)."""
        with self._lock:
            if what not in self._failing:
                return
            failures = self._failing.pop(what)
            ended = not self._failing
        log.debug("[outage] %s: %s works again after %d failures", self.subject, what, failures)
        if ended:
            log.info("[outage] %s: the broker answers again after %d ms", self.subject,
                     self._clock.now_ms() - self._since_ms)

    def guarded(self, what: str, action: Callable[[], object], retry_ms: int, *,
                reports_success: bool = True) -> Callable[[], None]:
        """``action`` reporting here: an outage failure is logged as above and swallowed (the
        next scheduled run retries); other errors propagate. ``reports_success=False`` for an
        action that may succeed without reaching the broker (nothing to send)."""

        def run() -> None:
            try:
                action()
            except BrokerUnavailableError as error:
                self.failed(what, error, retry_ms)
            else:
                if reports_success:
                    self.succeeded(what)

        return run


__all__ = ["OutageLog"]
