"""The whole story end to end, embedded (``postbox demo``, ``python -m examples.payments``).

1. Fresh store and SQLite database; outbox tables migrated; billing consumer started with an
   embedded Redis.
2. The order service places ``orders`` orders, one transaction each (order row + stub). Some
   are marked ``lose`` (first delivery dropped), ``flaky`` (handler fails once) or
   ``poison`` (handler always fails).
3. Duplicates: copies of already-sent messages are published straight to the broker, as a
   relay that crashed between publishing and recording would.
4. The periodic outbox tasks run (as the Celery beat would run them) until every stub is
   ``confirmed`` or ``void`` and the consumer has caught up.
5. The checks: every sent message ends confirmed or void; every dead-lettered message's stub
   is void; each confirmed order has exactly one ledger row and no void order has one; every
   injected duplicate was rejected; every lost message was resent and confirmed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import func, select

from postbox.framework import App, AppStateError
from postbox.outbox.tables import StubStatus, message_stub

from .app import build_app, build_outbox, build_worker, prepare_database
from .billing import GROUP
from .config import PaymentsConfig
from .faults import FLAKY, LOSE, POISON, FaultInjector
from .models import ledger, orders
from .orders import TAG, TOPIC, place_order

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``."""

SETTLE_POLL_S = 0.25
SETTLED_POLLS = 2
stub = message_stub.c


@dataclass(frozen=True)
class ScenarioOptions:
    """How many orders, and how many of each fault."""

    orders: int = 2_000
    lose: int = 20
    flaky: int = 40
    poison: int = 10
    duplicates: int = 50
    timeout_s: float = 45.0
    seed: int = 7


@dataclass
class Check:
    """One consistency check."""

    name: str
    passed: bool
    detail: str


@dataclass
class ScenarioReport:
    """What happened, counted from the database and the broker."""

    sent: int = 0
    confirmed: int = 0
    void_exhausted: int = 0
    void_dead_lettered: int = 0
    resent: int = 0
    retried: int = 0
    dead_letters: int = 0
    duplicates_injected: int = 0
    duplicates_rejected: int = 0
    lost_on_purpose: int = 0
    ledger_rows: int = 0
    settled: bool = False
    elapsed_s: float = 0.0
    place_s: float = 0.0
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every check passed."""
        return self.settled and all(check.passed for check in self.checks)


def run_scenario(config: PaymentsConfig, options: ScenarioOptions = ScenarioOptions(),
                 progress: Progress | None = None,
                 observe: Callable[[App, ScenarioReport], None] | None = None
                 ) -> ScenarioReport:
    """Play the scenario against ``config``'s (fresh) store and database; ``observe(app,
    report)`` runs once the report is counted, while the app still runs (a metrics scrape)."""
    report_progress = progress or (lambda phase, done, total: None)
    started = time.monotonic()
    prepare_database(config)
    faults = FaultInjector()
    app = build_app(config, faults=faults)
    box = build_outbox(app, config)
    worker = build_worker(config, app)
    report = ScenarioReport()
    app.start()
    try:
        marked = _faults(options)
        ids = _place_orders(box, options, marked, report_progress)
        report.place_s = time.monotonic() - started
        report.sent = len(ids)
        clean = [message_id for number, message_id in enumerate(ids) if number not in marked]
        worker.run("relay_pending", scheduled=False)  # what the hook has not published yet
        report.duplicates_injected = _publish_duplicates(
            app, box, random.Random(options.seed).sample(clean, min(options.duplicates,
                                                                   len(clean))))
        report.settled = _settle(app, box, worker, options, report_progress)
        worker.run("cleanup", scheduled=False)
        report.lost_on_purpose = faults.dropped
        _count(app, box, report)
        report.checks = [*_store_check(app), *_checks(box, report, options)]
        if observe is not None:
            observe(app, report)
    finally:
        app.stop()
    report.elapsed_s = time.monotonic() - started
    return report


def _faults(options: ScenarioOptions) -> dict[int, str]:
    chooser = random.Random(options.seed)
    numbers = chooser.sample(range(options.orders),
                             min(options.orders, options.lose + options.flaky + options.poison))
    kinds = [LOSE] * options.lose + [FLAKY] * options.flaky + [POISON] * options.poison
    return dict(zip(numbers, kinds, strict=False))


def _place_orders(box, options: ScenarioOptions, marked: dict[int, str],
                  progress: Progress) -> list[str]:
    ids: list[str] = []
    chooser = random.Random(options.seed + 1)
    for number in range(options.orders):
        with box.session.begin() as session:
            _, message_id = place_order(session, f"customer-{number % 97}",
                                        chooser.randrange(100, 100_000),
                                        fault=marked.get(number))
        ids.append(message_id)
        if number % 50 == 0 or number == options.orders - 1:
            progress("placing orders", number + 1, options.orders)
    return ids


def _publish_duplicates(app: App, box, message_ids: list[str]) -> int:
    if not message_ids:
        return 0
    with box.engine.connect() as connection:
        # only stubs the relay has published: a copy that overtook the relay's own publish
        # would be the only delivery (the relay skips a stub already confirmed)
        rows = connection.execute(select(stub.message_id, stub.content, stub["keys"]).where(
            stub.message_id.in_(message_ids), stub.published_at.is_not(None))).all()
    for message_id, content, keys in rows:
        app.producer.send(TOPIC, bytes(content), tags=TAG, keys=keys.split(" ") if keys else None,
                          unique_key=message_id)
    return len(rows)


def _settle(app: App, box, worker, options: ScenarioOptions,
            progress: Progress) -> bool:
    deadline = time.monotonic() + options.timeout_s
    total = options.orders
    consumer = app.consumer(GROUP)
    quiet_polls = 0
    while True:
        worker.run("relay_pending", scheduled=False)
        worker.run("resend_due", scheduled=False)
        with box.engine.connect() as connection:
            final = connection.execute(select(func.count()).select_from(message_stub).where(
                stub.status != StubStatus.UNCONFIRMED.value)).scalar_one()
        progress("confirming", final, total)
        idle = _lag(app) == 0 and consumer.in_flight_count() == 0
        quiet_polls = quiet_polls + 1 if final == total and idle else 0
        if quiet_polls >= SETTLED_POLLS:  # all final and the consumer idle twice in a row
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(SETTLE_POLL_S)


def _lag(app: App) -> int:
    return sum(queue.lag for queue in app.client.consumer_progress(GROUP)
               if queue.topic == TOPIC)


def _count(app: App, box, report: ScenarioReport) -> None:
    with box.engine.connect() as connection:
        rows = connection.execute(select(stub.status, stub.last_error, stub.send_count)).all()
        report.ledger_rows = connection.execute(
            select(func.count()).select_from(ledger)).scalar_one()
    for status, last_error, send_count in rows:
        report.resent += max(send_count - 1, 0)
        if status == StubStatus.CONFIRMED.value:
            report.confirmed += 1
        elif status == StubStatus.VOID.value:
            if (last_error or "").startswith("dead-lettered"):
                report.void_dead_lettered += 1
            else:
                report.void_exhausted += 1
    report.dead_letters = len(_dead_letter_ids(app))
    consumer = app.consumer(GROUP).stats()["consume"] or {}
    report.retried = consumer.get("retried", 0)
    for layer in app.middleware:
        stats = getattr(layer, "stats", None)
        if stats is not None and hasattr(stats, "duplicates_by_redis"):
            report.duplicates_rejected = stats.duplicates_by_redis + \
                stats.duplicates_by_database


def _dead_letter_ids(app: App) -> set[str]:
    ids: set[str] = set()
    offset = 0
    while True:
        letters = app.client.dead_letters(GROUP, offset, 100)
        if not letters:
            return ids
        ids.update(letter.unique_key for letter in letters if letter.unique_key is not None)
        offset = letters[-1].queue_offset + 1


def _store_check(app: App) -> list[Check]:
    """The embedded store took every write: a store that refused them (its disk above
    ``diskSpaceWarningLevelRatio``, say) voids every stub, and this check names the cause.
    Nothing for a remote broker, which reports its own refusals to the sender."""
    try:
        guard = app.broker.store.guard
    except AppStateError:
        return []
    detail = (f"{guard.refused_count} refused, the latest: {guard.last_refusal}"
              if guard.refused_count else "no write refused")
    return [Check("the store accepted every write", not guard.refused_count, detail)]


def _checks(box, report: ScenarioReport, options: ScenarioOptions) -> list[Check]:
    with box.engine.connect() as connection:
        statuses = dict(connection.execute(select(stub.message_id, stub.status)).all())
        billed = connection.execute(select(orders.c.message_id, orders.c.fault,
                                           ledger.c.order_id).select_from(
            orders.outerjoin(ledger, ledger.c.order_id == orders.c.id))).all()
        lost = connection.execute(select(stub.status, stub.send_count).select_from(
            message_stub.join(orders, orders.c.message_id == stub.message_id)).where(
            orders.c.fault == LOSE)).all()
    unsettled = [mid for mid, status in statuses.items()
                 if status == StubStatus.UNCONFIRMED.value]
    confirmed = StubStatus.CONFIRMED.value
    wrongly_billed = [mid for mid, _, order_id in billed
                      if (statuses.get(mid) == confirmed) != (order_id is not None)]
    poison_ok = all(statuses.get(mid) == StubStatus.VOID.value
                    for mid, fault, _ in billed if fault == POISON)
    lost_ok = all(status == StubStatus.CONFIRMED.value and sends >= 2 for status, sends in lost)
    return [
        Check("every sent message ends confirmed or void", not unsettled,
              f"{len(statuses) - len(unsettled)} of {len(statuses)} final"),
        Check("every dead-lettered message's stub is void",
              report.dead_letters == report.void_dead_lettered and poison_ok,
              f"{report.dead_letters} dead letters, {report.void_dead_lettered} void stubs"),
        Check("exactly one ledger row per confirmed order, none for void ones",
              not wrongly_billed and report.ledger_rows == report.confirmed,
              f"{report.ledger_rows} ledger rows, {report.confirmed} confirmed"),
        Check("every injected duplicate was rejected",
              report.duplicates_rejected == report.duplicates_injected,
              f"{report.duplicates_rejected} of {report.duplicates_injected} rejected"),
        Check("every lost message was resent and confirmed",
              lost_ok and len(lost) == options.lose,
              f"{sum(1 for status, _ in lost if status == 'confirmed')} of {len(lost)}"),
    ]


__all__ = ["Check", "ScenarioOptions", "ScenarioReport", "run_scenario"]
