"""The consumer side of ``BrokerClient`` over RocketMQ's remoting protocol.

``Consuming`` holds what a consumer asks of a broker, with the embedded ``Broker``'s
semantics (``storage_engine.contract.BrokerClient``; facts: ``reference/rocketmq-remoting.md``
§2.2, §4, §5, §9.5, §9.9–§9.12). Queues are the framework's: ``queue_id`` is the global number
of ``routes`` (a (broker, queue) pair of the topic's route), and every call goes to the master
of that queue's broker. Names are the application's; ``routes.namespace`` adds and strips a
namespace on the wire.

- ``pull``, ``wait_for_arrival``, ``wake_waiters``: ``pulling.Puller`` (long polls and
  read-ahead over the multiplexed connections).
- ``register_consumer``, ``unregister_consumer``, ``consumer_ids``, ``add_membership_listener``:
  ``membership.Membership``; the first registration starts ``HeartbeatService``.
- ``commit_offset`` (UPDATE_CONSUMER_OFFSET, 15, answered: durable at the broker when it
  returns; a group RocketMQ 5 does not know yet is first created by a one-message pull, as the
  embedded broker takes commits of any group), ``query_offset`` (14 with
  ``setZeroIfNotFound=false``: 22 → None),
  ``start_offset`` (the embedded broker's consume-from rules: committed offset, else retry
  topics from 0 — the max offset for TIMESTAMP —, FIRST from GET_MIN_OFFSET, TIMESTAMP by
  SEARCH_OFFSET_BY_TIMESTAMP (default 30 min back), LAST from 0 when the broker says the queue
  is young (14 without the flag: RocketMQ's in-memory rule), else GET_MAX_OFFSET).
- ``send_back``: CONSUMER_SEND_MSG_BACK (36) by the message's commit-log position at its
  broker; the broker applies the delay level (0: 3 + reconsume count), ``maxReconsumeTimes`` and
  the DLQ exactly as the embedded broker does. The outcome is derived the same way the broker
  decides it (delay level < 0, or reconsume count ≥ the limit: DEAD_LETTER). A ``reason`` travels
  in the header field ``dlqReason`` (a Postbox extension: a Postbox broker stores it as
  ``DLQ_REASON``; RocketMQ's brokers ignore it). When a broker refuses a retry, the retry copy is
  sent to ``%RETRY%group`` by the client's producer (RocketMQ's client does the same), with
  ``RECONSUME_TIME``/``MAX_RECONSUME_TIMES`` set.
- ``lock_queues``/``unlock_queues``: LOCK_BATCH_MQ/UNLOCK_BATCH_MQ (41/42) per master, bodies
  of §4; a broker that fails grants nothing.

Thread-safety: every method may be called from any thread. ``close`` stops the heartbeats and
abandons pulls in the air; the registrations' brokers drop this client when its connections close.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from postbox.storage_engine.contract.config_beans import validate_group
from postbox.storage_engine.contract.message import GetResult, Message
from postbox.storage_engine.contract.model import (
    ConsumeFrom,
    SendBackOutcome,
    SendBackResult,
    SendResult,
)
from postbox.storage_engine.contract.rules import (
    CONSUME_TIMESTAMP_DEFAULT_AGE_MS,
    PULL_BATCH_MAX,
    RETRY_BASE_DELAY_LEVEL,
    validate_client_id,
    validate_queue_key,
)
from postbox.storage_engine.contract.send_back import send_back_copy
from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import (
    BrokerUnavailableError,
    InvalidMessageError,
    InvalidQueueError,
)
from postbox.storage_engine.formats import (
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_RECONSUME_TIME,
    MessageView,
    original_topic,
)
from postbox.storage_engine.formats.topic_names import RETRY_TOPIC_PREFIX, retry_topic

from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .broker_errors import RemotingGroupNotFoundError, check_success
from .context import ClientContext
from .errors import RemotingClientError, RemotingResponseError
from .membership import HEARTBEAT_INTERVAL_MS, HeartbeatService, Membership, MembershipListener
from .pull_answers import pull_request
from .pulling import Puller, QueueKey
from .routes import QueueRef, RouteTable

log = logging.getLogger(__name__)

RETRY_MAX_TIMES_DEFAULT = 16  # a subscription group's retryMaxTimes unless configured
Send = Callable[[Message], SendResult]


class Consuming:
    """Consumer operations of one remoting client (see the module docstring)."""

    def __init__(self, context: ClientContext, *, send: Send | None = None,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
                 read_ahead: bool = True) -> None:
        self._context = context
        self._routes = context.routes
        self._clock = context.clock
        self.send = send
        """The client's producer: the fallback of a refused send-back (None: raise instead)."""
        self._wrap = context.wire
        sub_version = self._clock.now_ms()
        self.puller = Puller(context, sub_version=sub_version, read_ahead=read_ahead)
        self.membership = Membership(context, sub_version=sub_version)
        self.heartbeats = HeartbeatService(self.membership, self._clock, heartbeat_interval_ms)
        self._closed = False

    @property
    def routes(self) -> RouteTable:
        """The route table the calls resolve queues with."""
        return self._routes

    # ---- pulling ---------------------------------------------------------------------------

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
             tags: str | None = None, suspend_timeout_ms: int = 0) -> GetResult:
        """Read from a queue with a tag filter; a broker holds it up to ``suspend_timeout_ms``
        when nothing is there yet."""
        _check_queue(group, topic, queue_id)
        _check_offset(topic, offset)
        if type(max_count) is not int or not 1 <= max_count <= PULL_BATCH_MAX:
            raise InvalidMessageError(f"max_count must be an integer in 1..{PULL_BATCH_MAX}, "
                                      f"got {max_count!r}", topic=topic)
        return self.puller.pull(group, topic, queue_id, offset, max_count, tags=tags,
                                suspend_timeout_ms=suspend_timeout_ms)

    def wait_for_arrival(self, positions: Mapping[QueueKey, int], timeout_ms: int,
                         cancel: Callable[[], bool] | None = None) -> bool:
        """Block until some queue in ``positions`` has news; False on timeout, wake, cancel."""
        return self.puller.wait_for_arrival(positions, timeout_ms, cancel)

    def wake_waiters(self) -> None:
        """End every ``wait_for_arrival`` in progress."""
        self.puller.wake_waiters()

    # ---- offsets ---------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next one ``group`` consumes (the broker answered)."""
        _check_queue(group, topic, queue_id)
        _check_offset(topic, offset)
        try:
            self._queue_call(RequestCode.UPDATE_CONSUMER_OFFSET, group, topic, queue_id,
                             {"commitOffset": offset}, f"commit of offset {offset}")
        except RemotingGroupNotFoundError:  # RocketMQ 5 creates groups on pulls, not commits
            self._create_group(group, topic, queue_id)
            self._queue_call(RequestCode.UPDATE_CONSUMER_OFFSET, group, topic, queue_id,
                             {"commitOffset": offset}, f"commit of offset {offset}")

    def _create_group(self, group: str, topic: str, queue_id: int) -> None:
        """Have the broker create ``group`` (with auto-creation on) by a one-message pull."""
        ref, address = self._locate(topic, queue_id)
        request = pull_request(self._wrap(group), self._wrap(topic), ref.broker_name,
                               ref.queue_id, 0, 1, None, 0, self._clock.now_ms())
        self._context.broker_call(address, request)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed next offset, or None when the group never committed there."""
        _check_queue(group, topic, queue_id)
        answer = self._queue_call(RequestCode.QUERY_CONSUMER_OFFSET, group, topic, queue_id,
                                  {"setZeroIfNotFound": False}, "offset query", allow_missing=True)
        return None if answer is None else int(answer.fields.get_int("offset", low=0))

    def start_offset(self, group: str, topic: str, queue_id: int,
                     consume_from: ConsumeFrom = ConsumeFrom.LAST,
                     timestamp_ms: int | None = None) -> int:
        """Committed offset, else the consume-from rule (module docstring)."""
        _check_queue(group, topic, queue_id)
        if not isinstance(consume_from, ConsumeFrom):
            raise InvalidMessageError(f"consume_from must be a ConsumeFrom, got "
                                      f"{consume_from!r}", topic=topic)
        committed = self.query_offset(group, topic, queue_id)
        if committed is not None:
            return committed
        if topic.startswith(RETRY_TOPIC_PREFIX):
            if consume_from is ConsumeFrom.TIMESTAMP:
                return self._queue_offset(RequestCode.GET_MAX_OFFSET, topic, queue_id, {})
            return 0
        if consume_from is ConsumeFrom.FIRST:
            return self._queue_offset(RequestCode.GET_MIN_OFFSET, topic, queue_id, {})
        if consume_from is ConsumeFrom.TIMESTAMP:
            if timestamp_ms is None:
                timestamp_ms = self._clock.now_ms() - CONSUME_TIMESTAMP_DEFAULT_AGE_MS
            return self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, queue_id,
                                      {"timestamp": timestamp_ms, "boundaryType": "lower"})
        young = self._queue_call(RequestCode.QUERY_CONSUMER_OFFSET, group, topic, queue_id, {},
                                 "offset query", allow_missing=True)
        if young is not None:  # no commit, yet an offset: the broker's young-queue rule
            return int(young.fields.get_int("offset", low=0))
        return self._queue_offset(RequestCode.GET_MAX_OFFSET, topic, queue_id, {})

    def _queue_offset(self, code: RequestCode, topic: str, queue_id: int,
                      fields: dict[str, Any]) -> int:
        answer = self._queue_call(code, None, topic, queue_id, fields, code.name)
        assert answer is not None
        return int(answer.fields.get_int("offset", low=0))

    def _queue_call(self, code: RequestCode, group: str | None, topic: str, queue_id: int,
                    fields: dict[str, Any], what: str, *,
                    allow_missing: bool = False) -> RemotingCommand | None:
        """A request about one queue to its master; None for QUERY_NOT_FOUND when allowed."""
        ref, address = self._locate(topic, queue_id)
        header = {"topic": self._wrap(topic), "queueId": ref.queue_id,
                  "bname": ref.broker_name, **fields}
        if group is not None:
            header["consumerGroup"] = self._wrap(group)
        answer = self._context.broker_call(address, RemotingCommand.request(code, header))
        if allow_missing and answer.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return check_success(f"{what} on {topic!r} queue {queue_id}", answer, address=address,
                             topic=topic)

    def _locate(self, topic: str, queue_id: int) -> tuple[QueueRef, str]:
        try:
            return self._routes.locate(topic, queue_id)
        except IndexError as error:
            raise InvalidQueueError(str(error), topic=topic) from None

    # ---- retries ---------------------------------------------------------------------------

    def send_back(self, group: str, message: MessageView, *, delay_level: int = 0,
                  max_reconsume_times: int | None = None,
                  reason: str | None = None) -> SendBackResult:
        """Hand a failed message back to its broker: retry later, or dead-letter it."""
        validate_group(group)
        if type(delay_level) is not int:
            raise InvalidMessageError(f"delay_level must be an integer, got {delay_level!r}")
        limit = RETRY_MAX_TIMES_DEFAULT if max_reconsume_times is None else max_reconsume_times
        if type(limit) is not int:
            raise InvalidMessageError(f"max_reconsume_times must be an integer, got {limit!r}")
        dead = delay_level < 0 or message.reconsume_count >= limit
        outcome = SendBackOutcome.DEAD_LETTER if dead else SendBackOutcome.RETRY
        try:
            self._send_back(group, message, delay_level, max_reconsume_times, reason)
        except RemotingResponseError as error:
            if dead or self.send is None:
                raise
            log.warning("[consume] broker refused the send-back of %s (%s): sending the retry "
                        "to %s itself", message.msg_id, error, retry_topic(group))
            receipt = self.send(self._retry_copy(group, message, delay_level, limit))
            return SendBackResult(outcome, receipt, message.reconsume_count + 1)
        return SendBackResult(outcome, None, message.reconsume_count + 1)

    def _send_back(self, group: str, message: MessageView, delay_level: int,
                   max_reconsume_times: int | None, reason: str | None) -> None:
        ref, address = self._locate(message.topic, message.queue_id)
        first_topic = original_topic(message.topic, message.properties)
        header: dict[str, Any] = {
            "offset": message.log_position, "group": self._wrap(group),
            "delayLevel": delay_level, "originMsgId": message.unique_key or message.msg_id,
            "originTopic": self._wrap(first_topic), "unitMode": False,
            "maxReconsumeTimes": max_reconsume_times, "bname": ref.broker_name,
            "dlqReason": reason}
        answer = self._context.broker_call(
            address, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header))
        check_success(f"send-back of {message.msg_id} for {group!r}", answer, address=address,
                      topic=message.topic)

    def _retry_copy(self, group: str, message: MessageView, delay_level: int,
                    limit: int) -> Message:
        """What the broker would have stored in ``%RETRY%group`` (RocketMQ's client fallback)."""
        level = delay_level or RETRY_BASE_DELAY_LEVEL + message.reconsume_count
        copy = send_back_copy(message, retry_topic(group), delay_level=level)
        properties = dict(copy.properties or {})
        properties[PROPERTY_RECONSUME_TIME] = str(message.reconsume_count + 1)
        properties[PROPERTY_MAX_RECONSUME_TIMES] = str(limit)
        copy.properties = properties
        copy.born_host = None  # the broker records this client's address
        return copy

    # ---- membership and locks --------------------------------------------------------------

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool:
        """Heartbeat into ``group``; kept up by the heartbeat service until unregistered."""
        new = self.membership.register_consumer(group, client_id, topics)
        if not self._closed:
            self.heartbeats.start()
        return new

    def unregister_consumer(self, group: str, client_id: str) -> None:
        """Leave ``group`` (UNREGISTER_CLIENT to the brokers it heartbeated)."""
        self.membership.unregister_consumer(group, client_id)

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of ``group``, sorted."""
        return self.membership.consumer_ids(group)

    def add_membership_listener(self, listener: MembershipListener) -> None:
        """Call ``listener(group)`` when a broker says the group's members changed."""
        self.membership.add_membership_listener(listener)

    def lock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]
                    ) -> set[QueueKey]:
        """Lock (or renew) queues for orderly consumption; the ones ``client_id`` now holds."""
        validate_group(group)
        validate_client_id(client_id)
        granted: set[QueueKey] = set()
        for address, by_wire in self._by_master(queues).items():
            request = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ,
                                              body=self._lock_body(group, client_id, by_wire))
            try:
                answer = check_success(
                    f"lock of {len(by_wire)} queues for {group!r}",
                    self._context.broker_call(address, request),
                    address=address)
                locked = fastjson.loads(answer.body).get("lockOKMQSet") or []
            except (RemotingClientError, BrokerUnavailableError, ValueError,
                    AttributeError) as error:
                log.warning("[orderly] %s: lock at %s failed (%s): those queues stay unlocked",
                            client_id, address, error)
                continue
            for entry in locked:
                key = _wire_key(entry)
                if key in by_wire:
                    granted.add(by_wire[key])
        return granted

    def unlock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None:
        """Release the given queues where ``client_id`` holds them (failures are logged: the
        broker's lease lapses by itself)."""
        validate_group(group)
        validate_client_id(client_id)
        for address, by_wire in self._by_master(queues).items():
            request = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ,
                                              body=self._lock_body(group, client_id, by_wire))
            try:
                check_success(f"unlock for {group!r}", self._context.broker_call(
                    address, request), address=address)
            except (RemotingClientError, BrokerUnavailableError) as error:
                log.warning("[orderly] %s: unlock at %s failed (%s): the locks lapse",
                            client_id, address, error)

    def _by_master(self, queues: Iterable[QueueKey]
                   ) -> dict[str, dict[tuple[str, str, int], QueueKey]]:
        """Queues grouped by their master: address → (wire topic, broker, queue) → queue."""
        grouped: dict[str, dict[tuple[str, str, int], QueueKey]] = {}
        for queue in queues:
            topic, queue_id = validate_queue_key(queue)
            try:
                ref, address = self._locate(topic, queue_id)
            except (InvalidQueueError, RemotingClientError) as error:
                log.info("[orderly] %s: no broker to lock it at (%s)", queue, error)
                continue
            grouped.setdefault(address, {})[
                (self._wrap(topic), ref.broker_name, ref.queue_id)] = (topic, queue_id)
        return grouped

    def _lock_body(self, group: str, client_id: str,
                   by_wire: Mapping[tuple[str, str, int], QueueKey]) -> bytes:
        queues = [{"brokerName": broker, "queueId": queue_id, "topic": topic}
                  for topic, broker, queue_id in sorted(by_wire)]
        return json.dumps({"clientId": client_id, "consumerGroup": self._wrap(group),
                           "mqSet": queues, "onlyThisBroker": False},
                          separators=(",", ":")).encode()

    def close(self) -> None:
        """Stop the heartbeats and abandon pulls in the air (idempotent)."""
        self._closed = True
        self.heartbeats.stop()
        self.puller.close()
        self.membership.close()


def _wire_key(entry: Any) -> tuple[str, str, int]:
    if not isinstance(entry, dict):
        return ("", "", -1)
    try:
        return (str(entry.get("topic")), str(entry.get("brokerName")), int(entry["queueId"]))
    except (KeyError, TypeError, ValueError):
        return ("", "", -1)


def _check_queue(group: str, topic: str, queue_id: int) -> None:
    validate_group(group)
    validate_topic(topic)
    if type(queue_id) is not int or queue_id < 0:
        raise InvalidQueueError(f"queue id must be an integer >= 0, got {queue_id!r}",
                                topic=topic)


def _check_offset(topic: str, offset: object) -> None:
    if type(offset) is not int or offset < 0:
        raise InvalidMessageError(f"offset must be an integer >= 0, got {offset!r}",
                                  topic=topic)


__all__ = ["Consuming", "Send"]
