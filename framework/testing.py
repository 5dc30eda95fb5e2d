"""Test helpers: ``InlineRunner`` drives an app's consumers on the caller's thread.

``InlineRunner(app).run_until_idle()`` starts the app without consumer threads and repeats, in
one thread and a fixed order: housekeeping due now (rebalance, offsets), delay-service
deliveries due now, and one pull round per consumer whose handlers run inline. It stops when a
round does nothing. With ``advance_clock=True`` and a ``FakeClock``, an idle round jumps the
clock to the next pending delayed delivery (or suspended orderly queue), so a message retried 16
times through the real delay levels (10 s … 2 h) reaches the DLQ in milliseconds, in order.

Async handlers run on their consumer's event loop thread even here: each inline handler call
waits for its coroutine, so the order of events stays fixed.

The delay service driven is the app's embedded broker's; an app talking to a remote broker
that is served from this process (tests of the gRPC transport) passes that broker as
``broker=``.
"""

from __future__ import annotations

from postbox.storage_engine import Broker, FakeClock

from .app import App
from .errors import AppStateError
from .transport import embedded_broker

_ROUND_LIMIT = 100_000


class InlineRunner:
    """Deterministic, single-threaded driver for an ``App``'s consumers."""

    def __init__(self, app: App, *, broker: Broker | None = None) -> None:
        self.app = app
        self._embedded = broker
        if not app.consumers:
            app.start(threads=False)
        for consumer in app.consumers:
            if consumer.consume is not None and consumer.threaded:
                raise AppStateError("InlineRunner needs an app started with threads=False")
        self.rounds = 0

    @property
    def _broker(self) -> Broker | None:
        if self._embedded is not None:
            return self._embedded
        return embedded_broker(self.app.client)

    def run_once(self) -> int:
        """One round: housekeeping, due deliveries, one pull round per consumer."""
        now_ms = self.app.clock.now_ms()
        work = 0
        broker = self._broker
        if broker is not None:
            broker.store.wait_dispatched()  # a timer record is read from its consume queue
            work += broker.delay_service.run_once(now_ms)
            work += broker.timer_service.run_once(now_ms)
            broker.store.wait_dispatched()
        for consumer in self.app.consumers:
            consumed_before = consumer.consumed_count()
            consumer.scheduler.run_due(now_ms)
            consumer.rebalance_if_members_changed()
            progressed, _, _ = consumer.pull_round()
            work += progressed + consumer.consumed_count() - consumed_before
        self.rounds += 1
        return work

    def run_until_idle(self, *, advance_clock: bool = False,
                       max_rounds: int = _ROUND_LIMIT) -> int:
        """Run rounds until one does nothing; returns the rounds run.

        With ``advance_clock`` (needs a ``FakeClock``), an idle round moves the clock to the
        next due delayed message or scheduled consumer action and continues.
        """
        clock = self.app.clock
        if advance_clock and not isinstance(clock, FakeClock):
            raise AppStateError("advance_clock=True needs App(clock=FakeClock())")
        for rounds in range(1, max_rounds + 1):
            if self.run_once():
                continue
            due = self._next_due_ms() if advance_clock else None
            if due is None:
                return rounds
            now_ms = clock.now_ms()
            if due > now_ms:
                assert isinstance(clock, FakeClock)  # advance_clock checked it above
                clock.advance(due - now_ms)
        raise AppStateError(f"consumers still busy after {max_rounds} rounds")

    def _next_due_ms(self) -> int | None:
        candidates = []
        broker = self._broker
        if broker is not None:
            for service in (broker.delay_service, broker.timer_service):
                due = service.next_deliver_ms()
                if due is not None:
                    candidates.append(due)
        for consumer in self.app.consumers:
            if consumer.in_flight_count():
                due = consumer.scheduler.next_due_ms()
                if due is not None:
                    candidates.append(due)
        return min(candidates) if candidates else None
