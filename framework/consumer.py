"""``Consumer``: one consumer-group member — rebalance, pull loop, offsets, shutdown.

Threads (``start``): one pull thread, a pool of consume threads (``ConsumeService``) and one
housekeeping ``Scheduler`` (rebalance, heartbeat, offset persistence, orderly lock renewal).
``start(threads=False)`` creates none of them: the inline test runner then calls
``rebalance``/``pull_round``/``run_due`` itself, deterministically, on one thread.

Pull loop: every assigned queue whose process queue has room (flow control: at most
``queue_max_messages`` messages / ``queue_max_bytes`` in flight, reference §12.4) is pulled
without waiting; when a whole round found nothing the thread long-polls the broker for any of
its queues. Rebalance (clustering): queues of every subscribed topic plus ``%RETRY%group`` are
split among the group's live members by the allocation strategy (averaging by default); a queue
that leaves this consumer is dropped (its in-flight results are no longer committed) after its
offset is persisted, so the next owner starts where this one stopped. Broadcasting: every
consumer takes every queue and keeps its offsets in a local file.

Logs: a consumer's start is one INFO line (its group, mode, topics and queues, summarised per
topic); each queue taken or released is DEBUG, a later change of assignment one INFO line. An
unreachable broker is one WARNING for the whole outage and one INFO when it answers again
(``framework.outage_log``), not a traceback per scheduled try.

Shutdown (``stop``): stop pulling, let the consume threads finish what was already pulled (up to
``drain_timeout_ms``), persist offsets, release orderly locks, leave the group.

Async handlers: a consumer owns one ``EventLoopThread`` (``framework.event_loop``), started with
the consumer when a handler of its group is ``async def`` (else on a middleware's first
``run_coroutine``); consume threads run each coroutine on it and wait. ``stop`` cancels the
coroutines still running after the drain (their messages stay uncommitted), closes the loop
(which releases any consume thread still waiting on it), then ends the consume threads.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postbox.storage_engine import (
    BrokerUnavailableError,
    Clock,
    GetResult,
    GetStatus,
    MessageView,
    retry_topic,
)
from postbox.storage_engine.contract import BrokerClient

from .allocation import MessageQueue, strategy_by_name
from .consume_service import ConsumeService, QueueState
from .errors import ConfigurationError
from .event_loop import STOP_TIMEOUT_MS_DEFAULT, EventLoopThread
from .handlers import ConsumerGroupPlan
from .middleware import Middleware
from .offset_store import BrokerOffsetStore, LocalFileOffsetStore, OffsetStore
from .outage_log import OutageLog
from .process_queue import ProcessQueue
from .scheduler import Scheduler
from .worker_pool import WorkerPool

log = logging.getLogger(__name__)

_instance_counter = itertools.count(1)
_ORDERLY_HANDOVER_WAIT_MS = 1_000  # RocketMQ waits up to 1 s for the consume lock
_WAIT_WHEN_FULL_MS = 20  # all queues flow-controlled: look again this soon
_UNAVAILABLE_BACKOFF_MS = 1_000  # a remote broker did not answer: pull again after this
_NOTHING_NEW = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE,
                GetStatus.NO_MATCHED_LOGIC_QUEUE)
_CORRECTED = (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY)


@dataclass(frozen=True, kw_only=True)
class ConsumerOptions:
    """Tuning for every consumer of an app (RocketMQ client defaults unless noted)."""

    pull_batch_size: int = 32
    consume_thread_count: int = 8
    """RocketMQ's Java client uses 20; CPython threads share one interpreter lock, so fewer
    threads do more for CPU-bound handlers (raise it for handlers that mostly wait on I/O)."""
    messages_per_task: int = 16
    """Messages of one pulled batch handed to a consume thread together (Postbox); a task
    always carries at least one full ``batch_size`` batch."""
    queue_max_messages: int = 1000
    queue_max_bytes: int = 100 * 1024 * 1024
    long_polling_ms: int = 5_000
    rebalance_interval_ms: int = 2_000
    """RocketMQ rebalances every 20 s; an embedded broker makes it cheap to do it more often."""
    heartbeat_interval_ms: int = 10_000
    persist_interval_ms: int = 5_000
    orderly_suspend_ms: int = 1_000
    local_retry_delay_ms: int = 5_000
    drain_timeout_ms: int = 30_000
    allocation: str = "averaging"
    offset_dir: Path | None = None
    """Broadcasting: where each consumer keeps its offsets (default ``~/.postbox_offsets``)."""

    def __post_init__(self) -> None:
        for name in ("pull_batch_size", "consume_thread_count", "messages_per_task",
                     "queue_max_messages", "queue_max_bytes", "long_polling_ms",
                     "rebalance_interval_ms", "heartbeat_interval_ms", "persist_interval_ms",
                     "orderly_suspend_ms", "local_retry_delay_ms", "drain_timeout_ms"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ConfigurationError(f"consumer option {name} must be a positive int, "
                                         f"got {value!r}")
        strategy_by_name(self.allocation)


def queue_summary(queues: Iterable[MessageQueue]) -> str:
    """``orders[0-7], %RETRY%billing[0]``: queues by topic, consecutive ids as ranges."""
    by_topic: dict[str, list[int]] = {}
    for queue in queues:
        by_topic.setdefault(queue.topic, []).append(queue.queue_id)
    parts = []
    for topic, ids in by_topic.items():
        ids.sort()
        runs: list[list[int]] = []
        for queue_id in ids:
            if runs and queue_id == runs[-1][-1] + 1:
                runs[-1].append(queue_id)
            else:
                runs.append([queue_id])
        spans = ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)
        parts.append(f"{topic}[{spans}]")
    count = sum(len(ids) for ids in by_topic.values())
    return f"{count} queues: {', '.join(parts)}" if parts else "no queues"


def new_client_id(instance_name: str | None = None) -> str:
    """``host@pid@instance`` plus a counter so consumers in one process differ."""
    name = instance_name or str(os.getpid())
    return f"{socket.gethostname()}@{name}#{next(_instance_counter)}"


class Consumer:
    """One member of a consumer group, running the handlers of ``plan``."""

    def __init__(self, client: BrokerClient, plan: ConsumerGroupPlan, *, clock: Clock,
                 options: ConsumerOptions | None = None,
                 middleware: list[Middleware] | None = None, client_id: str | None = None,
                 instance_name: str | None = None) -> None:
        self.client = client
        self.plan = plan
        self.group = plan.consumer_group
        self.clock = clock
        self.options = options or ConsumerOptions()
        self.client_id = client_id or new_client_id(instance_name)
        self._strategy = strategy_by_name(self.options.allocation)
        self._middleware = list(middleware or [])
        self._states: dict[MessageQueue, QueueState] = {}
        self._states_lock = threading.RLock()
        self._stopping = False
        self._stop_requested = threading.Event()
        self._started = False
        self._threads = False
        self._reassigned = False  # wakes the pull loop's long poll
        self._announced = False  # start() logged the first assignment
        self._members_changed = False  # threads=False: the inline driver rebalances
        self._pull_thread: threading.Thread | None = None
        self.scheduler = Scheduler(clock, f"consumer-{self.group}")
        self.outage = OutageLog(f"consumer {self.client_id} in {self.group}", clock)
        """Logs an unreachable broker once (``framework.outage_log``)."""
        self.offsets: OffsetStore
        if plan.broadcast:
            offset_dir = self.options.offset_dir or Path.home() / ".postbox_offsets"
            self.offsets = LocalFileOffsetStore(offset_dir / self._instance_dir(instance_name),
                                                self.group)
        else:
            self.offsets = BrokerOffsetStore(client, self.group)
        self._pool: WorkerPool | None = None
        self.consume: ConsumeService | None = None
        self.event_loop = self._new_event_loop()

    def _new_event_loop(self) -> EventLoopThread:
        return EventLoopThread(self.group, stop_timeout_ms=min(STOP_TIMEOUT_MS_DEFAULT,
                                                               self.options.drain_timeout_ms))

    def _instance_dir(self, instance_name: str | None) -> str:
        return instance_name or self.client_id.split("#")[0].replace("@", "_")

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def topics(self) -> list[str]:
        """Subscribed topics, plus ``%RETRY%group`` for clustering groups."""
        topics = sorted(self.plan.handlers)
        if not self.plan.broadcast:
            topics.append(retry_topic(self.group))
        return topics

    def start(self, *, threads: bool = True) -> None:
        """Join the group, take queues and (with ``threads``) start pulling and consuming."""
        if self._started:
            return
        self._threads = threads
        self.event_loop = self._new_event_loop()  # a stopped loop never restarts
        self._pool = WorkerPool(self.options.consume_thread_count, f"consume-{self.group}",
                                inline=not threads)
        o = self.options
        self.consume = ConsumeService(
            self.client, self.plan, middleware=self._middleware, offsets=self.offsets,
            pool=self._pool, scheduler=self.scheduler, clock=self.clock,
            messages_per_task=o.messages_per_task, orderly_suspend_ms=o.orderly_suspend_ms,
            local_retry_delay_ms=o.local_retry_delay_ms, event_loop=self.event_loop)
        if self.plan.has_async:
            self.event_loop.start()
            self._warn_unreachable_concurrency()
        self._ensure_topics()
        self.client.add_membership_listener(self._on_membership_change)
        self.heartbeat()
        self._started = True
        self.rebalance()
        self.scheduler.call_every(o.rebalance_interval_ms, self._guarded_rebalance)
        self.scheduler.call_every(o.heartbeat_interval_ms, self.outage.guarded(
            "heartbeat", self.heartbeat, o.heartbeat_interval_ms))
        self.scheduler.call_every(o.persist_interval_ms, self.outage.guarded(
            "offset persistence", self.persist_offsets, o.persist_interval_ms,
            reports_success=False))
        if threads:
            self.scheduler.start()
            self._pull_thread = threading.Thread(target=self._pull_loop,
                                                 name=f"postbox-pull-{self.group}")
            self._pull_thread.start()
        log.info("[consumer] %s joined group %s (%s, topics %s): %s", self.client_id,
                 self.group, "broadcast" if self.plan.broadcast else (
                     "orderly" if self.plan.orderly else "concurrent"), self.topics,
                 queue_summary(self.assigned_queues()))
        self._announced = True

    def _warn_unreachable_concurrency(self) -> None:
        threads = self.options.consume_thread_count
        for spec in self.plan.handlers.values():
            if spec.max_concurrency is not None and spec.max_concurrency > threads:
                log.warning("[consumer] %s: max_concurrency=%d but group %s has %d consume "
                            "threads, each waiting for one coroutine: at most %d run at once "
                            "(raise consume_thread_count)", spec.name, spec.max_concurrency,
                            self.group, threads, threads)

    def _ensure_topics(self) -> None:
        """Subscribed topics exist before the first rebalance (auto-created with defaults);
        the broker creates ``%RETRY%group`` on the first heartbeat."""
        for topic in self.plan.handlers:
            if self.client.topic_config(topic) is None:
                self.client.create_topic(topic)

    def stop(self) -> None:
        """Graceful shutdown: finish pulled work, persist offsets, leave the group."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        self._stop_requested.set()
        self.client.wake_waiters()
        if self._pull_thread is not None:
            self._pull_thread.join(self.options.long_polling_ms / 1000 + 10)
        assert self._pool is not None and self.consume is not None
        if not self._pool.wait_idle(self.options.drain_timeout_ms):
            log.warning("[consumer] %s: in-flight work did not finish within %d ms; it will "
                        "be consumed again after restart", self.client_id,
                        self.options.drain_timeout_ms)
        self.consume.stopping = True
        self.event_loop.cancel_in_flight()  # past the drain: their messages stay uncommitted
        self.scheduler.stop()
        self.event_loop.stop()  # bounded; releases consume threads still waiting on it
        self._pool.shutdown()
        with self._states_lock:
            queues = list(self._states)
        try:
            self._leave(queues)
        except BrokerUnavailableError as error:  # the broker drops us when heartbeats stop
            log.warning("[consumer] %s left group %s without telling the unreachable broker "
                        "(%s): messages after its last persisted offsets are delivered again",
                        self.client_id, self.group, error)
        self._started = False
        log.info("[consumer] %s left group %s", self.client_id, self.group)

    def _leave(self, queues: list[MessageQueue]) -> None:
        """Persist the offsets of ``queues``, release orderly locks, leave the group."""
        self.offsets.persist(queues)
        if self.plan.orderly and not self.plan.broadcast:
            self.client.unlock_queues(self.group, self.client_id,
                                      [(q.topic, q.queue_id) for q in queues])
        if not self.plan.broadcast:
            self.client.unregister_consumer(self.group, self.client_id)

    # ---- membership and rebalance ------------------------------------------------------------

    def heartbeat(self) -> None:
        """Tell the broker this consumer is alive (keeps it in the group)."""
        if not self.plan.broadcast:
            self.client.register_consumer(self.group, self.client_id, self.topics)

    def _on_membership_change(self, group: str) -> None:
        if group == self.group and self._started and not self._stopping:
            if self._threads:
                self.scheduler.call_later(0, self._guarded_rebalance)
            else:
                self._members_changed = True

    @property
    def threaded(self) -> bool:
        """Whether ``start`` created threads (False: an inline driver runs this consumer)."""
        return self._threads

    def rebalance_if_members_changed(self) -> bool:
        """Without threads: rebalance when the group changed since the last call."""
        if not self._members_changed:
            return False
        self._members_changed = False
        return self.rebalance()

    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer currently pulls, sorted."""
        with self._states_lock:
            return sorted(self._states)

    def _guarded_rebalance(self) -> None:
        """A scheduled rebalance: during an outage one warning, not a traceback per try."""
        self.outage.guarded("rebalance", self.rebalance, self.options.rebalance_interval_ms)()

    def rebalance(self) -> bool:
        """Recompute this consumer's queues; returns True when the assignment changed."""
        if self._stopping:
            return False
        wanted = set(self._wanted_queues())
        with self._states_lock:
            current = set(self._states)
            for queue in sorted(current - wanted):
                self._release(queue)
            for queue in sorted(wanted - current):
                self._take(queue)
            if self.plan.orderly and not self.plan.broadcast:
                self._renew_locks()
            changed = wanted != current
        if changed and self._announced:  # start() logs the first assignment in its one line
            log.info("[rebalance] %s in %s now has %s", self.client_id, self.group,
                     queue_summary(sorted(wanted)))
        if changed:
            self._reassigned = True
            if self._threads:
                self.client.wake_waiters()
        return changed

    def _wanted_queues(self) -> list[MessageQueue]:
        ids = [] if self.plan.broadcast else self.client.consumer_ids(self.group)
        wanted: list[MessageQueue] = []
        for topic in self.topics:
            queues = [MessageQueue(topic, q) for q in self.client.queue_ids(topic)]
            if self.plan.broadcast:
                wanted.extend(queues)
            else:
                wanted.extend(self._strategy.allocate(self.group, self.client_id, queues, ids))
        return wanted

    def _take(self, queue: MessageQueue) -> None:
        offset = self.offsets.read(queue)
        if offset is None:
            start = self.plan.handlers.get(queue.topic) or next(iter(self.plan.handlers.values()))
            offset = self.client.start_offset(self.group, queue.topic, queue.queue_id,
                                              start.consume_from, start.consume_timestamp_ms)
            self.offsets.update(queue, offset)
        spec = self.plan.handlers.get(queue.topic)
        tags = spec.tags if spec else "*"
        process_queue: ProcessQueue[MessageView] = ProcessQueue()
        self._states[queue] = QueueState(queue, process_queue, offset, tags)
        log.debug("[rebalance] %s takes %s from offset %d", self.client_id, queue, offset)

    def _release(self, queue: MessageQueue) -> None:
        state = self._states.pop(queue)
        state.process_queue.drop()
        self.offsets.persist([queue])
        self.offsets.forget(queue)
        if self.plan.orderly and not self.plan.broadcast:
            self._unlock_when_idle(state)
        log.debug("[rebalance] %s releases %s", self.client_id, queue)

    def _unlock_when_idle(self, state: QueueState) -> None:
        """Hand an orderly queue over only once its running handler call finished; otherwise
        keep the lock until it lapses, so two consumers never run one queue at once."""
        deadline_s = time.monotonic() + _ORDERLY_HANDOVER_WAIT_MS / 1000
        while state.orderly_running and time.monotonic() < deadline_s:
            time.sleep(0.005)
        if state.orderly_running:
            log.warning("[rebalance] %s: %s is still consuming; its lock lapses instead",
                        self.client_id, state.queue)
            return
        self.client.unlock_queues(self.group, self.client_id,
                                  [(state.queue.topic, state.queue.queue_id)])

    def _renew_locks(self) -> None:
        keys = [(q.topic, q.queue_id) for q in self._states]
        granted = self.client.lock_queues(self.group, self.client_id, keys) if keys else set()
        now_ms = self.clock.now_ms()
        for queue, state in self._states.items():
            locked = (queue.topic, queue.queue_id) in granted
            was_locked = state.process_queue.locked
            state.process_queue.locked = locked
            if locked:
                state.process_queue.lock_renewed_ms = now_ms
                if not was_locked and state.process_queue.count and self.consume:
                    self.consume.schedule_orderly(state)

    def persist_offsets(self) -> None:
        """Commit the offsets of every assigned queue."""
        with self._states_lock:
            queues = list(self._states)
        self.offsets.persist(queues)

    # ---- pulling -----------------------------------------------------------------------------

    def pull_round(self) -> tuple[int, dict[tuple[str, int], int], bool]:
        """Pull every queue once without waiting.

        Returns (messages or corrections made, idle queues → offset, whether some queue was
        skipped by flow control).
        """
        progressed = 0
        idle: dict[tuple[str, int], int] = {}
        throttled = False
        with self._states_lock:
            states = list(self._states.values())
        for state in states:
            pq = state.process_queue
            if pq.dropped:
                continue
            if pq.is_full(self.options.queue_max_messages, self.options.queue_max_bytes):
                throttled = True
                continue
            result = self.client.pull(self.group, state.queue.topic, state.queue.queue_id,
                                      state.next_offset, self.options.pull_batch_size,
                                      tags=state.tags)
            progressed += self._apply_pull(state, result, idle)
        return progressed, idle, throttled

    def _apply_pull(self, state: QueueState, result: GetResult,
                    idle: dict[tuple[str, int], int]) -> int:
        status = result.status
        pq = state.process_queue
        pq.last_pull_ms = self.clock.now_ms()
        if status is GetStatus.FOUND:
            views: list[MessageView] = result.messages
            pq.add(views)
            state.next_offset = result.next_offset
            assert self.consume is not None
            self.consume.submit(state, views)
            return len(views)
        if status in _NOTHING_NEW:
            idle[(state.queue.topic, state.queue.queue_id)] = state.next_offset
            return 0
        if status in _CORRECTED:
            log.warning("[pull] %s offset %d is illegal (%s): moving to %d", state.queue,
                        state.next_offset, status.value, result.next_offset)
            self._correct_offset(state, result.next_offset, reset=True)
            return 1
        # NO_MATCHED_MESSAGE / MESSAGE_WAS_REMOVING: skip what the filter or retention removed
        if result.next_offset == state.next_offset:
            idle[(state.queue.topic, state.queue.queue_id)] = state.next_offset
            return 0
        self._correct_offset(state, result.next_offset, reset=False)
        return 1

    def _correct_offset(self, state: QueueState, offset: int, *, reset: bool) -> None:
        state.next_offset = offset
        if state.process_queue.count == 0 and not state.process_queue.dropped:
            if reset:
                self.offsets.reset(state.queue, offset)
            else:
                self.offsets.update(state.queue, offset)

    def _pull_loop(self) -> None:
        try:
            while not self._stopping:
                try:
                    self._pull_once()
                except BrokerUnavailableError as error:  # remote transport: wait, try again
                    self.outage.failed("pull", error, _UNAVAILABLE_BACKOFF_MS)
                    self._stop_requested.wait(_UNAVAILABLE_BACKOFF_MS / 1000)
                else:
                    self.outage.succeeded("pull")
        except Exception:
            log.exception("[pull] consumer %s stopped pulling", self.client_id)

    def _pull_once(self) -> None:
        """One pull round, then a wait when it found nothing."""
        self._reassigned = False
        progressed, idle, throttled = self.pull_round()
        if progressed or self._stopping:
            return
        wait_ms = _WAIT_WHEN_FULL_MS if throttled or not idle else self.options.long_polling_ms
        if idle:
            self.client.wait_for_arrival(idle, wait_ms, cancel=self._should_wake)
        else:
            self._stop_requested.wait(wait_ms / 1000)

    def _should_wake(self) -> bool:
        return self._stopping or self._reassigned

    # ---- introspection -----------------------------------------------------------------------

    def in_flight_count(self) -> int:
        """Messages pulled and not yet finished."""
        with self._states_lock:
            return sum(state.process_queue.count for state in self._states.values())

    def consumed_count(self) -> int:
        """Handler invocations so far (messages)."""
        return self.consume.stats.consumed if self.consume else 0

    def stats(self) -> dict[str, Any]:
        """A JSON-able summary of this consumer."""
        consume = self.consume.stats if self.consume else None
        return {"client_id": self.client_id, "group": self.group,
                "queues": [str(q) for q in self.assigned_queues()],
                "in_flight": self.in_flight_count(),
                "consume": None if consume is None else vars(consume).copy()}
