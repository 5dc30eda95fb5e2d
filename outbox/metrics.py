"""The outbox's metric families: stubs by status, publish latency, resends, voids, alerts.

One ``OutboxMetrics`` per app (``outbox_metrics(app)``, a named source of ``app.metrics``)
collects every relay, resender and alerter the app's ``Outbox`` and ``OutboxWorker`` made and
sums their counters at scrape time (``RelayStats``, ``ResendStats``, ``Alerter.fired``).

Stubs by status are one ``GROUP BY status`` query per scrape on the first database registered,
run on a daemon thread and waited for at most ``query_timeout_s``: a database that refuses
connections, or one that accepts and never answers, makes that scrape report
``postbox_outbox_stubs_query_error 1`` (and no ``postbox_outbox_stubs`` samples) instead of
hanging the scrape. While a query is still stuck, later scrapes do not start another one (at most
one thread waits on the database); they report the error until it returns. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, func, select

from postbox.framework import App
from postbox.framework.metrics import Metric, counter, gauge, histogram, merge_snapshots

from .tables import StubStatus, message_stub

log = logging.getLogger(__name__)

QUERY_TIMEOUT_S = 2.0
"""Longest a scrape waits for the stubs-by-status query."""
SOURCE_NAME = "postbox.outbox"


class StubCounter:
    """``GROUP BY status`` on ``message_stub`` with a deadline (see the module docstring)."""

    def __init__(self, engine: Engine, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.engine = engine
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._running: threading.Thread | None = None

    def counts(self) -> dict[str, int] | None:
        """Status → stubs, or None when the database did not answer in time (logged)."""
        result: dict[str, Any] = {}
        done = threading.Event()

        def query() -> None:
            try:
                with self.engine.connect() as connection:
                    rows = connection.execute(select(message_stub.c.status, func.count())
                                              .group_by(message_stub.c.status)).all()
                result["counts"] = {str(status): int(count) for status, count in rows}
            except Exception as error:  # reported as the error gauge, not raised to the scrape
                result["error"] = error
            finally:
                done.set()

        with self._lock:
            if self._running is not None and self._running.is_alive():
                log.warning("[metrics] the previous stubs query has not returned; not starting "
                            "another")
                return None
            self._running = threading.Thread(target=query, name="postbox-metrics-stubs",
                                             daemon=True)
            self._running.start()
        if not done.wait(self.timeout_s):
            log.warning("[metrics] the stubs query took longer than %.1f s; reported as an "
                        "error", self.timeout_s)
            return None
        if "error" in result:
            error = result["error"]
            log.warning("[metrics] the stubs query failed: %s: %s", type(error).__name__,
                        str(error).splitlines()[0] if str(error) else "")
            return None
        counts: dict[str, int] = result["counts"]
        return counts


class OutboxMetrics:
    """The relays, resenders and stub database of one app (a ``MetricsSource``)."""

    def __init__(self, timeout_s: float = QUERY_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._stubs: StubCounter | None = None
        self._relays: list[Any] = []
        self._resenders: list[Any] = []
        self._lock = threading.Lock()

    def add_relay(self, relay: Any) -> None:
        """Count ``relay`` (a ``Relay``); its engine is the stub database if none is yet."""
        with self._lock:
            self._relays.append(relay)
            if self._stubs is None:
                self._stubs = StubCounter(relay.engine, self.timeout_s)

    def add_resender(self, resender: Any) -> None:
        """Count ``resender`` (a ``Resender``) and its alerter."""
        with self._lock:
            self._resenders.append(resender)

    def metric_families(self) -> Iterable[Metric]:
        """The outbox families, built now."""
        with self._lock:
            relays, resenders, stubs = list(self._relays), list(self._resenders), self._stubs
        families: list[Metric] = []
        if stubs is not None:
            counts = stubs.counts()
            families.append(gauge("postbox_outbox_stubs_query_error", "1 when the last "
                                  "stubs-by-status query failed or timed out, else 0.", [],
                                  [((), 0 if counts is not None else 1)]))
            if counts is not None:
                families.append(gauge("postbox_outbox_stubs", "Stubs in the outbox table, by "
                                      "status.", ["status"], [((status.value,), counts.get(
                                          status.value, 0)) for status in StubStatus]))
        families += _relay_families(relays)
        families += _resend_families(resenders, relays)
        return families


def _relay_families(relays: list[Any]) -> list[Metric]:
    latency = merge_snapshots(relay.stats.publish_latency.snapshot() for relay in relays)
    return [
        counter("postbox_outbox_published", "Stubs the relays published for the first time "
                "(after commit or by polling; resends are postbox_outbox_resends).", [],
                [((), sum(relay.stats.published for relay in relays))]),
        counter("postbox_outbox_publish_failures", "Publish attempts that failed (retried "
                "later, or voided after the last attempt).", [],
                [((), sum(relay.stats.failed for relay in relays))]),
        histogram("postbox_outbox_publish_seconds", "Duration of the publish call of each "
                  "stub published (a batch send's for each of its stubs; first publishes and "
                  "resends: one per group a resend reached).", [],
                  [] if latency is None else [((), latency)]),
    ]


def _resend_families(resenders: list[Any], relays: list[Any]) -> list[Metric]:
    alerters = list({id(r.alerter): r.alerter for r in resenders}.values())
    kinds: dict[str, int] = {}
    for alerter in alerters:
        for kind, count in alerter.fired.items():
            kinds[str(kind)] = kinds.get(str(kind), 0) + count
    voids = {"exhausted": sum(r.stats.exhausted for r in resenders),
             "dead_lettered": sum(r.stats.dead_lettered for r in resenders),
             "publish_failed": sum(relay.stats.voided for relay in relays)}
    return [
        counter("postbox_outbox_resends", "Stubs resent because a consumer group moved past "
                "them without processing them.", [],
                [((), sum(r.stats.resent for r in resenders))]),
        counter("postbox_outbox_voids", "Stubs made void, by reason.", ["reason"],
                sorted(((reason,), count) for reason, count in voids.items())),
        counter("postbox_outbox_alerts", "Alerts fired, by kind.", ["kind"],
                sorted(((kind,), count) for kind, count in kinds.items())),
    ]


def outbox_metrics(app: App) -> OutboxMetrics:
    """The app's ``OutboxMetrics`` (made and added to ``app.metrics`` on first use)."""
    return app.metrics.source(SOURCE_NAME, OutboxMetrics)


__all__ = ["QUERY_TIMEOUT_S", "OutboxMetrics", "StubCounter", "outbox_metrics"]
