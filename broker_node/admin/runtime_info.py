"""GET_BROKER_RUNTIME_INFO (28): the ``KVTable`` ``mqadmin clusterList`` / ``brokerStatus`` read.

``RuntimeStats`` counts the messages the remoting broker stores and hands to consumers (its SEND
and PULL handlers call ``record_put`` / ``record_get``; the gRPC service does not count), keeps
the totals at the start of today and yesterday (UTC days) and one sample a second for the
last ten minutes, from which ``putTps`` / ``getTransferredTps`` are the rates over 10 s, 1 min
and 10 min (``"a b c"``, as RocketMQ writes them). Every value is a string, as in Java's
``KVTable``. The keys ``clusterList`` reads:
``brokerVersionDesc``, ``msgPut/GetTotalTodayNow``, ``msgPut/GetTotalTodayMorning``,
``msgPut/GetTotalYesterdayMorning``, ``putTps``, ``getTransferredTps``, ``commitLogDiskRatio``,
``earliestMessageTimeStamp``, ``pageCacheLockTimeMills``, ``send/pullThreadPoolQueueSize``,
``send/pullThreadPoolQueueHeadWaitTimeMills``, ``brokerActive``, ``timer*`` — plus what the
store knows (commit-log positions, dispatch lag, boot time). The timer service gives
``timerOffsetBehind`` (timer records stored and not yet read into the wheel),
``timerReadBehind`` (seconds the earliest undelivered timer is overdue), ``timerCongestNum``
(timers waiting in the wheel, as Apache sums its slots from the read time on: the same figure
as Postbox's ``postboxTimerPending``), ``timerEnqueueTps`` / ``timerDequeueTps`` (timer-log
appends and deliveries a second over the last 10 s) and ``postboxTimerDelivered`` (since the
start); all 0 on a slave, which delivers none. Values Postbox has no equivalent for
(thread-pool queues, page-cache lock time) are ``0``.
``postboxServicesFailed`` (Postbox's own key, printed by ``mqadmin brokerStatus`` with the
others) names each broker service that an error stopped (``timer: CorruptionError: ...``;
``;``-separated, empty while all run): the broker keeps serving without it, so this is where
an operator sees that timers, delays or transaction checks stopped.

Time comes from the injected clock. Thread-safety: one lock around the counters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from postbox.network.protocol.codes import SERVER_VERSION, RequestCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine import BrokerRole
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.clock import Clock
from postbox.storage_engine.rates import CounterRates

from ..namesrv.route_bodies import kv_table_body

DAY_MS = 86_400_000
SAMPLE_INTERVAL_MS = 1_000
SAMPLE_WINDOW_MS = 600_000
VERSION_DESC = "V5_3_3"
_ZERO_KEYS = ("sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
              "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
              "pageCacheLockTimeMills")
_TIMER_KEYS = ("timerOffsetBehind", "timerReadBehind", "timerCongestNum", "timerEnqueueTps",
               "timerDequeueTps", "postboxTimerPending", "postboxTimerDelivered")


class RuntimeStats:
    """Message counters of one broker since it started."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.boot_ms = clock.now_ms()
        self._totals = [0, 0]  # put, get
        self._day_start_ms = self.boot_ms - self.boot_ms % DAY_MS
        self._today_morning = [0, 0]
        self._yesterday_morning = [0, 0]
        self._rates = CounterRates(self.boot_ms, self._totals, keep_ms=SAMPLE_WINDOW_MS,
                                   interval_ms=SAMPLE_INTERVAL_MS)

    def now_ms(self) -> int:
        """The stats' clock."""
        return self._clock.now_ms()

    def record_put(self, count: int = 1) -> None:
        """``count`` messages were stored."""
        self._record(0, count)

    def record_get(self, count: int = 1) -> None:
        """``count`` messages were handed to consumers."""
        self._record(1, count)

    def _record(self, index: int, count: int) -> None:
        now_ms = self._clock.now_ms()
        with self._lock:
            self._roll(now_ms)
            self._totals[index] += count

    def _roll(self, now_ms: int) -> None:
        """Under the lock: start a new day, take a sample a second, drop old samples."""
        while now_ms - self._day_start_ms >= DAY_MS:
            self._day_start_ms += DAY_MS
            self._yesterday_morning = self._today_morning
            self._today_morning = list(self._totals)
        self._rates.sample(now_ms, self._totals)

    def table(self) -> dict[str, str]:
        """The counter part of the runtime table."""
        now_ms = self._clock.now_ms()
        with self._lock:
            self._roll(now_ms)
            totals = list(self._totals)
            today, yesterday = list(self._today_morning), list(self._yesterday_morning)
        table = {}
        for index, kind in enumerate(("Put", "Get")):
            table[f"msg{kind}TotalTodayNow"] = str(totals[index])
            table[f"msg{kind}TotalTodayMorning"] = str(today[index])
            table[f"msg{kind}TotalYesterdayMorning"] = str(yesterday[index])
        windows = [self._rates.per_second(now_ms, totals, window_ms)
                   for window_ms in (10_000, 60_000, 600_000)]
        table["putTps"] = " ".join(f"{rates[0]:.2f}" for rates in windows)
        table["getTransferredTps"] = table["getTotalTps"] = " ".join(
            f"{rates[1]:.2f}" for rates in windows)
        return table


def runtime_table(broker: Broker, stats: RuntimeStats,
                  postbox_version: str = "0.1.0") -> dict[str, str]:
    """Every key of the runtime table."""
    store = broker.store
    log = store.commit_log
    table: dict[str, Any] = dict.fromkeys(_ZERO_KEYS, "0")
    table.update(stats.table())
    table.update({
        "brokerVersionDesc": VERSION_DESC, "brokerVersion": str(SERVER_VERSION),
        "postboxVersion": postbox_version, "brokerActive": "true",
        "bootTimestamp": str(stats.boot_ms),
        "startAcceptSendRequestTimeStamp": str(stats.boot_ms),
        "commitLogMinOffset": str(log.min_position), "commitLogMaxOffset": str(log.max_position),
        "dispatchBehindBytes": str(max(0, log.max_position - store.dispatch.position)),
        "commitLogDiskRatio": f"{store.retention.disk_used_ratio:.4f}",
        "earliestMessageTimeStamp": str(_earliest_store_time_ms(broker)),
        "runtime": _uptime(stats.boot_ms, stats.now_ms()),
        **_timer_figures(broker, stats.now_ms()),
        "postboxServicesFailed": "; ".join(f"{state.name}: {state.failure}"
                                           for state in broker.service_states()
                                           if state.failure is not None),
    })
    return table


def _timer_figures(broker: Broker, now_ms: int) -> dict[str, str]:
    """The timer service's keys (zeros on a slave, which delivers no timers)."""
    timers = broker.timer_service
    if broker.store.config.broker_role is BrokerRole.SLAVE:
        return dict.fromkeys(_TIMER_KEYS, "0")
    pending = str(timers.pending_count())
    enqueued, delivered = timers.rates_per_second(now_ms)
    return {"timerOffsetBehind": str(timers.offset_behind()),
            "timerReadBehind": str(timers.read_behind_ms(now_ms) // 1000),
            "timerCongestNum": pending, "timerEnqueueTps": f"{enqueued:.2f}",
            "timerDequeueTps": f"{delivered:.2f}",
            "postboxTimerPending": pending,
            "postboxTimerDelivered": str(timers.delivered_count)}


def _earliest_store_time_ms(broker: Broker) -> int:
    store = broker.store
    if store.commit_log.max_position <= store.commit_log.min_position:
        return 0
    try:
        return store.read_message(store.commit_log.min_position).store_timestamp_ms
    except Exception:  # a damaged or blank first record: no answer, not an error
        return 0


def _uptime(boot_ms: int, now_ms: int) -> str:
    seconds = max(0, now_ms - boot_ms) // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def runtime_info_handler(broker: Broker, stats: RuntimeStats
                         ) -> Callable[[RemotingCommand, object], RemotingCommand]:
    """The GET_BROKER_RUNTIME_INFO handler."""
    def handle(request: RemotingCommand, session: object) -> RemotingCommand:
        return request.response(body=kv_table_body(runtime_table(broker, stats)))
    return handle


def register_runtime_info(handlers: Any, broker: Broker, stats: RuntimeStats) -> None:
    """Bind GET_BROKER_RUNTIME_INFO in a ``HandlerTable``."""
    handlers.register(RequestCode.GET_BROKER_RUNTIME_INFO, runtime_info_handler(broker, stats))


__all__ = ["RuntimeStats", "register_runtime_info", "runtime_table"]
