"""``Broker``: RocketMQ's broker semantics over an embedded ``MessageStore``.

Owns: topic config (auto-created on first send, ``topic_manager``; at most
``broker.topic_count_max``), subscription groups (at most ``broker.subscription_group_count_max``),
consumer offsets (in memory, persisted every ``broker.consumer_offset_persist_interval_ms`` and
at close, ``broker_persist``), the delay service (18 levels through ``SCHEDULE_TOPIC_XXXX``), the
timer service, send-back to ``%RETRY%group`` / ``%DLQ%group`` (reference §10.2), long polling,
the consumer registry of each group for client-side rebalancing and orderly queue locks. It
tells the store how far every group has consumed (``consumption_floor``), so disk pressure
deletes only consumed data. Transactional (half) messages and check-back: ``transactions``,
``transaction_check``.

Config tables: the broker, not the store, owns ``config/*.json`` (``ConfigStores``, as in
RocketMQ). ``Broker.open`` loads them once it holds the store's lock and before the store
recovers (``MessageStore.open(on_locked=...)``), so a table that cannot be loaded refuses the open
with nothing changed; ``Broker(store)`` loads them over a store already open.

Services: the persist service, then the delay, timer and transaction-check services
(``timer_service``: timer messages through ``rmq_sys_wheel_timer``), started in that order by the
constructor and stopped in reverse by ``close``, which then persists the config tables and closes
the store when the broker owns it (``Broker.open``). On a SLAVE store only the first runs (the
master delivers and checks; replication brings its writes), and sends and send-backs raise
``NotMasterError``.

Errors: invalid input (group and topic names, negative offsets, queue ids outside a topic)
raises a ``StorageError`` subclass naming the value; normal outcomes (no message yet, offset out
of range, a dead-lettered send-back) are return values.

Thread-safety: every public method may be called from any thread. Crash behaviour: topics and
groups are on disk once created; consumer and delay offsets younger than their last periodic
persist are lost with the process (consumers then re-read a few messages, as in RocketMQ).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..clock import Clock, SystemClock
from ..config import BrokerRole, StoreConfig
from ..contract.config_beans import SubscriptionGroupConfig, TopicConfig, validate_group
from ..contract.message import GetResult, Message
from ..contract.model import (
    PERM_READ,
    PERM_READ_WRITE,
    ConsumeFrom,
    QueueProgress,
    SendBackOutcome,
    SendBackResult,
    SendResult,
)
from ..contract.rules import (
    RETRY_BASE_DELAY_LEVEL,
    validate_client_id,
    validate_queue_key,
)
from ..contract.send_back import resend_copy, send_back_copy
from ..contract.topics import validate_topic
from ..errors import (
    GroupNotFoundError,
    InvalidMessageError,
    InvalidQueueError,
    NoPermissionError,
    NotMasterError,
    StoreClosedError,
    TableFullError,
)
from ..formats import MessageView, empty_body_problem
from ..formats.topic_names import (
    DELAY_TOPIC,
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    dead_letter_topic,
    is_system_group_topic,
    retry_topic,
)
from ..service import Service, ServiceState
from ..store.message_store import MessageStore
from .config_stores import CONFIG_DIR_NAME, ConfigStores
from .consumer_registry import ConsumerRegistry, MembershipListener
from .consumption_floor import ConsumptionFloor
from .delay_service import DelayService
from .dlq_resends import DlqResends, dead_letter_at
from .long_polling import ArrivalWaiter, long_poll
from .persist import BrokerPersistService
from .progress import ProgressReader, check_batch, check_offset, physical_memory_bytes
from .queue_locks import QueueLockTable
from .send_rules import batch_problem, divert, send_result
from .timer_service import TimerService
from .topic_manager import TopicManager, check_writable
from .transaction_check import TransactionalSends, Transactions

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]  # (topic, queue_id)

DLQ_QUEUE_COUNT = 1


class Broker(TransactionalSends):
    """Broker semantics over one store. Create with ``Broker.open(config)`` or
    ``Broker(store)`` (then the caller keeps owning the store).

    ``memory_bytes`` is the physical RAM used by the consume-from-last "message still in
    memory" estimate (reference §12.2); it defaults to this machine's. ``start_services=False``
    runs no service thread (inspection tools: nothing is delivered, checked or persisted behind
    their back; ``close`` still persists the tables). ``tables``: the store's config tables,
    already loaded (``Broker.open`` passes them), else loaded here from ``config/``.
    """

    remote = False  # the contract's capability: this object is the broker, in this process

    def __init__(self, store: MessageStore, *, clock: Clock | None = None,
                 owns_store: bool = False, memory_bytes: int | None = None,
                 start_services: bool = True, tables: ConfigStores | None = None) -> None:
        self._store = store
        self._clock = clock or store.clock
        self._owns_store = owns_store
        self._config = store.config.broker
        self._delay = store.config.delay
        self._tables = (tables if tables is not None
                        else ConfigStores.open(store.root_dir, self._clock))
        self.dlq_resends = DlqResends(store.root_dir / CONFIG_DIR_NAME, self._clock)
        self.dlq_resends.load()
        self._topics = TopicManager(self._tables.topics, self._config,
                                    store.config.queue_id_max + 1)
        self._group_lock = threading.Lock()
        self._waiter = ArrivalWaiter(self._queue_max_offset, self._config.long_polling_max_ms)
        self._queue_locks = QueueLockTable(self._config.queue_lock_expiry_ms)
        self._registry = ConsumerRegistry(self._config.consumer_expiry_ms, self._clock,
                                          self._queue_locks)
        self._random = random.Random()
        self._progress = ProgressReader(store, self._tables.consumer_offsets,
                                        physical_memory_bytes() if memory_bytes is None
                                        else memory_bytes)
        self._close_lock, self._closed = threading.Lock(), False
        self.persist_service = BrokerPersistService(self._tables, self._config, self._clock,
                                                    self._registry.expire)
        self.delay_service = DelayService(store, self._tables.delay_offsets, self._delay.levels_ms,
                                          self._clock)
        self.timer_service = TimerService(store, self._tables.consumer_offsets, self._clock)
        self._is_slave = store.config.broker_role is BrokerRole.SLAVE
        self._services: list[Service] = [self.persist_service]
        self.transactions = Transactions(store, self._tables.consumer_offsets, self._config,
                                         self._clock, self._put, self._topics.ensure)
        if not self._is_slave:  # a slave's commit log is written by replication only
            self.transactions.halves.recover()
            self._services += [self.delay_service, self.timer_service,
                               self.transactions.check_service]
        store.add_arrival_listener(self._waiter.on_arrival)
        store.add_arrival_listener(self.timer_service.on_arrival)
        store.set_consumption_floor(ConsumptionFloor(  # disk pressure keeps unconsumed data
            store, self._tables.consumer_offsets, self._tables.delay_offsets,
            lambda: {group: self._registry.topics(group) for group in self._registry.groups()}))
        started: list[Service] = []
        try:
            for service in self._services if start_services else ():
                service.start()
                started.append(service)
        except BaseException:
            for service in reversed(started):
                service.stop()
            raise

    @classmethod
    def open(cls, config: StoreConfig, *, clock: Clock | None = None,
             memory_bytes: int | None = None) -> Broker:
        """Load the config tables and open the store (``MessageStore.open``), then start the
        broker's services on it.

        The tables are loaded once the store's lock is held and before the store recovers: a
        table that cannot be loaded (``ConfigFileError``) refuses the open with nothing changed.
        """
        clock = clock or SystemClock()
        tables = ConfigStores(config.root_dir / CONFIG_DIR_NAME, clock)
        store = MessageStore.open(config, clock=clock, on_locked=tables.load_all)
        try:
            return cls(store, clock=clock, owns_store=True, memory_bytes=memory_bytes,
                       tables=tables)
        except BaseException:
            store.close()
            raise

    def close(self) -> None:
        """Stop services, persist offsets/delay progress/config, close the store if owned."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._waiter.wake_all()
        for service in reversed(self._services):
            service.stop()
        self._store.set_consumption_floor(None)
        try:
            self._tables.persist_all()
        finally:
            if self._owns_store:
                self._store.close()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def store(self) -> MessageStore:
        """The store this broker works on."""
        return self._store

    def service_states(self) -> list[ServiceState]:
        """The broker's own services (persistence, delays, timers, transaction checks; the
        store's services put the store into fail-stop instead): running, stopped or failed."""
        return [service.state for service in self._services]

    @property
    def delay_level_count(self) -> int:
        """Delay levels a send may ask for: the store's ``messageDelayLevel``."""
        return len(self._store.config.delay.levels_ms)

    @property
    def tables(self) -> ConfigStores:
        """The config tables this broker owns (topics, groups, consumer and delay offsets,
        filters): for tools and tests; the broker's methods are the way to change them."""
        return self._tables

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"broker on {self._store.root_dir} is closed")

    def _check_master(self) -> None:
        if self._is_slave:
            raise NotMasterError(f"broker on {self._store.root_dir} is a SLAVE: it refuses "
                                 "sends and send-backs (send to the master)")

    # ---- topics and groups -------------------------------------------------------------------

    def create_topic(self, topic: str, queue_count: int | None = None, *, perm: int = 6,
                     order: bool = False) -> TopicConfig:
        """Create or update a topic (read = write = ``queue_count`` queues)."""
        self._check_open()
        return self._topics.create(topic, queue_count, perm, order)

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None when it does not exist."""
        return self._topics.get(topic)

    def queue_ids(self, topic: str) -> list[int]:
        """Readable queue ids of a topic (``range(read_queue_nums)``); [] when unknown."""
        config = self._topics.get(topic)
        return [] if config is None else list(range(config.read_queue_nums))

    def subscription_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's config, created with defaults when auto-creation is on."""
        validate_group(group)
        config = self._tables.subscription_groups.get(group)
        if config is not None:
            return config
        if not self._config.auto_create_subscription_group:
            raise GroupNotFoundError(
                f"subscription group {group!r} does not exist and "
                "broker.auto_create_subscription_group is off")
        with self._group_lock:
            config = self._tables.subscription_groups.get(group)
            if config is None:
                self._check_group_room(group)
                config = SubscriptionGroupConfig(group)
                self._tables.subscription_groups.put(config)
                self._tables.subscription_groups.persist()
                log.info("[broker] created subscription group %s", group)
            return config

    def _check_group_room(self, group: str) -> None:
        limit = self._config.subscription_group_count_max
        count = len(self._tables.subscription_groups)
        if count >= limit:
            raise TableFullError(
                f"cannot create subscription group {group!r}: the broker holds {count} groups, "
                f"the most broker.subscription_group_count_max (broker.conf "
                f"subscriptionGroupCountMax) allows ({limit}); delete unused groups or raise it",
                setting="broker.subscription_group_count_max")

    def _system_group_topic(self, topic: str) -> TopicConfig:
        """``%RETRY%g`` (the group's retry_queue_nums queues) or ``%DLQ%g`` (1 queue), perm 6,
        created if absent."""
        if topic.startswith(DLQ_TOPIC_PREFIX):
            return self._topics.ensure(topic, DLQ_QUEUE_COUNT, PERM_READ_WRITE)
        group = self.subscription_group(topic[len(RETRY_TOPIC_PREFIX):])
        return self._topics.ensure(topic, max(1, group.retry_queue_nums), PERM_READ_WRITE)

    def _check_queue(self, topic: str, queue_id: int) -> TopicConfig | None:
        """Validate a (topic, queue id) being read or committed; return the topic's config."""
        validate_topic(topic)
        if type(queue_id) is not int or queue_id < 0:
            raise InvalidQueueError(f"queue id must be an integer >= 0, got {queue_id!r}",
                                    topic=topic)
        config = self._topics.get(topic)
        if config is not None and queue_id >= config.read_queue_nums:
            raise InvalidQueueError(f"queue id {queue_id} is not in 0..{config.read_queue_nums - 1}"
                                    f" (topic {topic!r} has {config.read_queue_nums} read queues)",
                                    topic=topic)
        return config

    # ---- send --------------------------------------------------------------------------------

    def send(self, message: Message, *, queue_id: int | None = None,
             sharding_key: str | None = None) -> SendResult:
        """Store a message: auto-create the topic, pick the queue (explicit, else by sharding
        key ``abs(java_hash(key)) % write_queue_nums``, else round-robin per topic), divert a
        ``DELAY`` property (level 1..18, clamped) to ``SCHEDULE_TOPIC_XXXX``.

        Raises:
            NotMasterError: the store is a SLAVE.
        """
        self._check_open()
        self._check_master()
        return self._put(message, self._send_queue(message, queue_id, sharding_key))

    def _send_queue(self, message: Message, queue_id: int | None, sharding_key: str | None) -> int:
        """The queue a send of ``message`` goes to (its topic created on first send)."""
        return self._topics.select_queue(self._send_config(message), queue_id, sharding_key)

    def send_batch(self, messages: Sequence[Message], *, queue_id: int | None = None,
                   sharding_key: str | None = None) -> list[SendResult]:
        """Store messages of one topic in one queue at consecutive offsets, in one append
        (RocketMQ's batch send): the queue is picked once, as ``send`` picks it, and the
        batch is stored whole or not at all.

        Raises:
            InvalidMessageError: no message, more than one topic, an empty body, or a
                ``DELAY`` level (a batch is never delayed); nothing was stored.
            NotMasterError: the store is a SLAVE.
        """
        self._check_open()
        self._check_master()
        if problem := batch_problem(messages, self._delay.levels_ms):
            raise InvalidMessageError(problem, topic=messages[0].topic if messages else None)
        for message in messages[1:]:
            if problem := empty_body_problem(message.body, message.properties):
                raise InvalidMessageError(problem, topic=message.topic)
        chosen = self._send_queue(messages[0], queue_id, sharding_key)
        return [send_result(message, chosen, result, 0) for message, result in
                zip(messages, self._store.put_messages(messages, chosen), strict=True)]

    def _send_config(self, message: Message) -> TopicConfig:
        """The config of the topic ``message`` goes to, created on first send when allowed;
        refuses an empty body before a topic is created (a refused send writes nothing)."""
        problem = empty_body_problem(message.body, message.properties)
        if problem:
            raise InvalidMessageError(problem, topic=message.topic)
        topic = message.topic
        config = self._topics.get(topic) if type(topic) is str else None
        if config is None or topic == DELAY_TOPIC:  # known topics were validated on creation
            topic = validate_topic(topic)
            if is_system_group_topic(topic) and self._topics.get(topic) is None:
                self._system_group_topic(topic)
            return self._topics.for_send(topic)
        check_writable(config)
        return config

    def _put(self, message: Message, queue_id: int, *, delay: bool = True) -> SendResult:
        """Store ``message`` for ``queue_id``, through the delay or timer topic if it asks."""
        stored, stored_queue_id, level = divert(message, queue_id, self._clock.now_ms(),
                                                self._delay) if delay else (message, queue_id, 0)
        return send_result(message, queue_id, self._store.put_message(stored, stored_queue_id),
                           level)

    def find_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]:
        """Messages stored in ``topic`` with this ``UNIQ_KEY`` (through the key index), e.g. a
        delayed message once the delay service delivered it to its real topic."""
        self._check_open()
        return self._store.query_by_unique_key(validate_topic(topic), unique_key)

    # ---- pull and long polling ---------------------------------------------------------------

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
             tags: str | None = None, suspend_timeout_ms: int = 0) -> GetResult:
        """Read from a queue with a tag filter; when nothing is there yet, wait up to
        ``suspend_timeout_ms`` (capped at ``broker.long_polling_max_ms``) for dispatch.

        Raises:
            NoPermissionError: the topic is not readable or the group may not consume.
        """
        self._check_open()
        self._check_pull(group, topic, queue_id, offset, max_count)
        return long_poll(
            lambda start: self._store.get_message(group, topic, queue_id, start, max_count,
                                                  tags=tags),
            offset, self._waiter, (topic, queue_id),
            min(suspend_timeout_ms, self._config.long_polling_max_ms), lambda: self._closed)

    def _check_pull(self, group: str, topic: str, queue_id: int, offset: int,
                    max_count: int) -> None:
        validate_group(group)
        group_config = self._tables.subscription_groups.get(group)
        if group_config is not None and not group_config.consume_enable:
            raise NoPermissionError(f"subscription group {group!r} has consume_enable off",
                                    topic=topic)
        config = self._check_queue(topic, queue_id)
        if config is not None and not config.perm & PERM_READ:
            raise NoPermissionError(f"topic {topic!r} is not readable (perm={config.perm})",
                                    topic=topic)
        check_batch(topic, offset, max_count)

    def wait_for_arrival(self, positions: Mapping[QueueKey, int], timeout_ms: int,
                         cancel: Callable[[], bool] | None = None) -> bool:
        """Block until some queue in ``positions`` has ``max_offset > positions[queue]``;
        False after ``timeout_ms`` (capped at ``long_polling_max_ms``), ``wake_waiters`` or
        once ``cancel()`` is true."""
        self._check_open()
        for queue in positions:
            validate_queue_key(queue)
        return self._waiter.wait(positions, timeout_ms, cancel)

    def wake_waiters(self) -> None:
        """Wake every ``wait_for_arrival`` caller (shutdown, rebalance)."""
        self._waiter.wake_all()

    def _queue_max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._store.queues.get(topic, queue_id)  # no closed check: waiters may outlive
        return 0 if queue is None else queue.max_offset

    # ---- offsets -----------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next one ``group`` consumes (overwrites, even backwards)."""
        validate_group(group)
        self._check_queue(topic, queue_id)
        self._tables.consumer_offsets.commit(topic, group, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed next offset, or None when the group never committed there."""
        validate_group(group)
        self._check_queue(topic, queue_id)
        return self._tables.consumer_offsets.query(topic, group, queue_id)

    def start_offset(self, group: str, topic: str, queue_id: int,
                     consume_from: ConsumeFrom = ConsumeFrom.LAST,
                     timestamp_ms: int | None = None) -> int:
        """Committed offset, else the consume-from rule of reference §12.2/§12.3."""
        self._check_open()
        validate_group(group)
        self._check_queue(topic, queue_id)
        if not isinstance(consume_from, ConsumeFrom):
            raise InvalidMessageError(f"consume_from must be a ConsumeFrom, got "
                                      f"{consume_from!r}", topic=topic)
        committed = self._tables.consumer_offsets.query(topic, group, queue_id)
        if committed is not None:
            return committed
        return self._progress.initial_offset(group, topic, queue_id, consume_from,
                                             timestamp_ms, self._clock.now_ms())

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """The group's position on every queue of the topics it committed on, its members
        subscribe to, and its retry topic; sorted by (topic, queue id)."""
        validate_group(group)
        topics = self._progress.committed_topics(group) | self._registry.topics(group)
        retry = retry_topic(group)
        if self._topics.get(retry) is not None:
            topics.add(retry)
        return self._progress.progress(group, topics, self.queue_ids)

    def consumer_groups(self) -> list[str]:
        """Every group known from offsets, subscription groups or live members, sorted."""
        groups = set(self._progress.committed_groups())
        groups.update(self._tables.subscription_groups.names())
        groups.update(self._registry.groups())
        return sorted(groups)

    # ---- retry and dead letters --------------------------------------------------------------

    def send_back(self, group: str, message: MessageView, *, delay_level: int = 0,
                  max_reconsume_times: int | None = None,
                  reason: str | None = None) -> SendBackResult:
        """Reference §10.2; ``delay_level < 0`` dead-letters at once.

        ``reason`` (Postbox extension) is stored as the ``DLQ_REASON`` property when the
        message is dead-lettered.

        Raises:
            GroupNotFoundError: the group does not exist and cannot be auto-created.
            NoPermissionError: the retry or dead-letter topic is not writable.
            NotMasterError: the store is a SLAVE.
        """
        self._check_open()
        self._check_master()
        config = self.subscription_group(group)
        if type(delay_level) is not int:
            raise InvalidMessageError(f"delay_level must be an integer, got {delay_level!r}")
        reconsume_count = message.reconsume_count + 1
        if config.retry_queue_nums <= 0:
            log.info("[broker] group %s has retry_queue_nums=%d: send-back of %s discarded",
                     group, config.retry_queue_nums, message.msg_id)
            return SendBackResult(SendBackOutcome.DISCARDED, None, reconsume_count)
        retry = self._system_group_topic(retry_topic(group))
        limit = config.retry_max_times if max_reconsume_times is None else max_reconsume_times
        if type(limit) is not int:
            raise InvalidMessageError(f"max_reconsume_times must be an integer, got {limit!r}")
        if message.reconsume_count >= limit or delay_level < 0:
            dlq = self._system_group_topic(dead_letter_topic(group))
            check_writable(dlq)
            copy = send_back_copy(message, dlq.topic_name, delay_level=0, reason=reason)
            receipt = self._put(copy, 0, delay=False)
            log.info("[broker] group %s: %s dead-lettered after %d consumptions", group,
                     message.msg_id, reconsume_count)
            return SendBackResult(SendBackOutcome.DEAD_LETTER, receipt, reconsume_count)
        check_writable(retry)
        level = delay_level or RETRY_BASE_DELAY_LEVEL + message.reconsume_count
        copy = send_back_copy(message, retry.topic_name, delay_level=level)
        queue_id = self._random.randrange(min(config.retry_queue_nums, retry.write_queue_nums))
        receipt = self._put(copy, queue_id)
        return SendBackResult(SendBackOutcome.RETRY, receipt, reconsume_count)

    def dead_letters(self, group: str, offset: int = 0, max_count: int = 100
                     ) -> list[MessageView]:
        """Dead letters of ``group`` (``%DLQ%group`` queue 0) from ``offset`` (raised to the
        queue's min offset); [] when there are none."""
        self._check_open()
        validate_group(group)
        topic = dead_letter_topic(group)
        check_batch(topic, offset, max_count)  # an operator's read: consume_enable is moot
        start = max(offset, self._store.min_offset(topic, 0))
        result = self._store.get_message(group, topic, 0, start, max_count)
        return result.messages

    def resend_dead_letter(self, group: str, queue_offset: int) -> SendResult:
        """Send the dead letter at ``queue_offset`` again, as a new message, to ``group`` only:
        through ``%RETRY%group`` with ``RETRY_TOPIC`` = the topic it first failed on (consumers
        see it under that topic). The DLQ keeps its copy; ``dlq_resends`` records the resend.

        Raises:
            MessageNotFoundError: ``%DLQ%group`` queue 0 has no message at ``queue_offset``.
        """
        self._check_open()
        validate_group(group)
        check_offset(dead_letter_topic(group), queue_offset)
        view, target = dead_letter_at(self._store, group, queue_offset)
        retry = self._system_group_topic(retry_topic(group))
        check_writable(retry)
        receipt = self._put(resend_copy(view, retry.topic_name, original_topic=target),
                            self._random.randrange(retry.write_queue_nums), delay=False)
        self.dlq_resends.record(group, queue_offset, receipt.offset_msg_id, self._clock.now_ms())
        log.info("[broker] re-sent dead letter %s of %s to %s (for %s) as %s", view.msg_id,
                 group, retry.topic_name, target, receipt.offset_msg_id)
        return receipt

    # ---- consumer registry and queue locks ---------------------------------------------------

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool:
        """Heartbeat; returns True when this call changed the group's membership.

        As RocketMQ's heartbeat, the first one also creates the subscription group (when
        auto-creation is on) and its retry topic, so members can subscribe to ``%RETRY%group``.
        """
        self._check_open()
        validate_group(group)
        validate_client_id(client_id)
        if isinstance(topics, str):
            raise InvalidMessageError(f"topics must be an iterable of names, not the str "
                                      f"{topics!r}")
        names = [validate_topic(topic) for topic in topics]
        if (self._tables.subscription_groups.get(group) is None
                and self._config.auto_create_subscription_group
                and self.subscription_group(group).retry_queue_nums > 0):
            self._system_group_topic(retry_topic(group))
        return self._registry.heartbeat(group, client_id, names)

    def unregister_consumer(self, group: str, client_id: str) -> None:
        """Remove a member (releasing its queue locks); listeners hear of the change."""
        validate_group(group)
        self._registry.unregister(group, client_id)

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of ``group``, sorted lexicographically (expired ones dropped)."""
        validate_group(group)
        return self._registry.members(group)

    def add_membership_listener(self, listener: MembershipListener) -> None:
        """Call ``listener(group)`` (outside locks) whenever a group's member set changes."""
        self._registry.add_listener(listener)

    def lock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]
                    ) -> set[QueueKey]:
        """Lock (or renew) queues for orderly consumption; return those ``client_id`` now
        holds. A live lock of another client is not taken."""
        validate_group(group)
        validate_client_id(client_id)
        return self._queue_locks.lock(group, client_id, queues, self._clock.now_ms())

    def unlock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None:
        """Release the given queues where ``client_id`` holds them."""
        validate_group(group)
        validate_client_id(client_id)
        self._queue_locks.unlock(group, client_id, queues)

