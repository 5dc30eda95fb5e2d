"""Sending over remoting: ``Sender`` turns ``BrokerClient.send`` into SEND_MESSAGE_V2 / SEND_BATCH.

One send (reference §2.1, §9.6–§9.8):

1. The message is checked as the embedded store checks it (topic name, body, property names
   and framing, sizes) and encoded: user properties, then ``KEYS``, ``TAGS`` and ``UNIQ_KEY``
   (generated as RocketMQ's producers do when the message has none); a ``DELAY`` property
   stays a property (the broker diverts the message to ``SCHEDULE_TOPIC_XXXX``).
2. The topic's route gives the queue, numbered globally (``routes``): ``queue_id`` as given,
   else by ``sharding_key`` (``abs(java_hash(key)) % writable queues``, the embedded broker's
   rule over the topic's writable queues), else round robin. A topic no name server knows is
   sent through the ``TBW102`` route with ``defaultTopic=TBW102``, so a broker that
   auto-creates topics creates it (8 queues, the embedded default), as Java producers do. With
   neither route, the send fails with ``TopicNotFoundError`` when the name servers know a
   broker with a master, else with ``RouteNotFoundError`` (no broker registered now: an
   outage, not a missing topic).
3. Response codes: 0 is ``PUT_OK``; 10/11/12 are stored-but-not-confirmed statuses
   (``FLUSH_DISK_TIMEOUT``, ``SLAVE_NOT_AVAILABLE``, ``FLUSH_SLAVE_TIMEOUT``), returned, not
   raised; 17/14/1/2/16 (and 204/205/1500) are tried on another broker of the route (3
   attempts in all, RocketMQ's default), as is a broker that cannot be connected to. A timeout
   or a connection lost after the request was written is raised at once
   (``BrokerUnavailableError``): the message may be stored, and a blind retry would store it
   twice.

**Coalescing and pipelining** (``send_lanes``). Concurrent sends to one topic go through a
``Lane``: the sender that finds nobody writing writes everything queued as one request — a
SEND_BATCH_MESSAGE (320) to one queue (round robin per call) when several messages queued, a
SEND_MESSAGE_V2 for one — and does not wait for the answer before the next sender writes, so
up to ``MAX_CALLS_IN_FLIGHT`` calls are in flight on one connection; past that, senders queue
and the answer that ends a call writes what queued as the next call. The connection's reader
hands each answer straight to the senders of that call. A message with its own queue or
sharding key shares calls only with sends for that same queue or key. Delayed messages and
retry topics go alone (brokers refuse them in batches), as do sends that need failover. A
broker that answers 320 with REQUEST_CODE_NOT_SUPPORTED gets single sends from then on.

Thread safety: ``send`` may be called from any thread.
"""

from __future__ import annotations

import itertools
import random
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from postbox.storage_engine.contract.message import Message, PutStatus
from postbox.storage_engine.contract.model import SendResult
from postbox.storage_engine.contract.rules import batch_shape_problem, sharding_queue
from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import (
    BrokerUnavailableError,
    InvalidMessageError,
    InvalidQueueError,
    PropertiesTooLargeError,
    TopicNotFoundError,
)
from postbox.storage_engine.formats import (
    MAX_MESSAGE_SIZE_BYTES,
    PROPERTIES_SIZE_MAX_BYTES,
    PROPERTY_DELAY,
    PROPERTY_TIMER_DEL_UNIQKEY,
    UniqueKeyGenerator,
    body_problem,
    decode_offset_msg_id,
    empty_body_problem,
    encode_properties,
    property_name_problem,
)
from postbox.storage_engine.formats.topic_names import (
    AUTO_CREATE_TOPIC,
    DELAY_TOPIC,
    is_retry_topic,
)

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .broker_errors import response_error
from .connection import PendingCall
from .context import ClientContext
from .errors import ConnectFailedError, RemotingResponseError, RouteNotFoundError
from .routes import QueueRef, TopicRoute
from .send_lanes import Lane, Slot

PRODUCER_GROUP = "POSTBOX_PRODUCER"
DEFAULT_TOPIC_QUEUE_NUMS = 8
SEND_ATTEMPTS = 3
_DEFAULT_QUEUE_NUMS_TEXT = str(DEFAULT_TOPIC_QUEUE_NUMS)
DELAY_LEVEL_MAX = 18
RETRY_CODES = frozenset({17, 14, 1, 2, 16, 204, 205, 1500})
STATUS_BY_CODE: dict[int, PutStatus] = {
    ResponseCode.SUCCESS: PutStatus.PUT_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: PutStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: PutStatus.SLAVE_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: PutStatus.FLUSH_SLAVE_TIMEOUT,
}
_BATCH_ENTRY_HEAD = struct.Struct(">iiiii")  # size, magic 0, body crc 0, flag, body length
_PROPERTIES_LENGTH = struct.Struct(">h")


@dataclass(frozen=True)
class SendAlone:
    """A lane slot's outcome: send the message by itself, with failover (``attempts`` were
    already made, on the brokers in ``avoid``)."""

    avoid: frozenset[str] = frozenset()
    attempts: int = 0


FAIL_OVER = SendAlone()


@dataclass(frozen=True)
class Outgoing:
    """A checked, encoded message on its way."""

    message: Message
    wire_topic: str
    body: bytes
    properties: str
    unique_key: str
    delay_level: int
    queue_id: int | None
    sharding_key: str | None

    @property
    def batchable(self) -> bool:
        """Whether it may share a SEND_BATCH_MESSAGE (no delay, not a retry topic)."""
        return not self.delay_level and not is_retry_topic(self.wire_topic)

    def entry(self) -> bytes:
        """Its entry in a batch body (reference §2.6)."""
        properties = self.properties.encode("utf-8")
        size = _entry_size(len(self.body), len(properties))
        return b"".join((_BATCH_ENTRY_HEAD.pack(size, 0, 0, self.message.flag, len(self.body)),
                         self.body, _PROPERTIES_LENGTH.pack(len(properties)), properties))


class Sender:
    """``BrokerClient.send`` over remoting (see the module docstring)."""

    def __init__(self, context: ClientContext, *, producer_group: str = PRODUCER_GROUP,
                 coalesce: bool = True) -> None:
        self._context = context
        self._group = producer_group
        self._coalesce = coalesce
        self._keys = UniqueKeyGenerator(context.clock.now_ms)
        self._turns: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()
        self._lanes: dict[tuple[str, int | str | None], Lane] = {}
        self._batch_supported = True

    # -- entry point -----------------------------------------------------------------------

    def send(self, message: Message, queue_id: int | None, sharding_key: str | None
             ) -> SendResult:
        """Store ``message`` on a broker; see the module docstring."""
        outgoing = self.prepare(message, queue_id, sharding_key)
        if not (self._coalesce and self._batch_supported and outgoing.batchable):
            return self._send_alone(outgoing)
        key = (outgoing.wire_topic, queue_id if queue_id is not None else sharding_key)
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                if len(self._lanes) >= 4096:
                    self._lanes.clear()  # a bound; a dropped lane only loses company
                lane = self._lanes[key] = Lane(self._write_batch)
        outcome = lane.submit(outgoing, self._context.timeout_ms)
        if isinstance(outcome, SendAlone):
            return self._send_alone(outgoing, outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, SendResult)
        return outcome

    def send_batch(self, messages: Sequence[Message], queue_id: int | None,
                   sharding_key: str | None) -> list[SendResult]:
        """Store ``messages`` (one topic, none delayed) in one queue at consecutive offsets
        with one SEND_BATCH_MESSAGE, failing over as a single send does; see
        ``Broker.send_batch``. Nothing is sent when one of them is refused here."""
        if not messages:
            raise InvalidMessageError("a batch needs at least one message")
        batch = [self.prepare(message, queue_id, sharding_key) for message in messages]
        if problem := _batch_problem(batch):
            raise InvalidMessageError(problem, topic=batch[0].message.topic)
        results = self._attempts(batch, set())
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [result for result in results if isinstance(result, SendResult)]

    def prepare(self, message: Message, queue_id: int | None, sharding_key: str | None
                ) -> Outgoing:
        """Check and encode ``message`` (``InvalidMessageError`` names what is wrong)."""
        topic = validate_topic(message.topic)
        if topic == DELAY_TOPIC:
            raise InvalidMessageError(f"{DELAY_TOPIC} is the broker's delay topic; send with "
                                      "delay_level= instead", topic=topic)
        body = message.body
        if problem := body_problem(body) or empty_body_problem(body, message.properties):
            raise InvalidMessageError(problem, topic=topic)
        body = bytes(body)
        if len(body) > MAX_MESSAGE_SIZE_BYTES:
            raise InvalidMessageError(f"body of {len(body):,} bytes is over the "
                                      f"{MAX_MESSAGE_SIZE_BYTES:,}-byte limit", topic=topic)
        if queue_id is not None and (type(queue_id) is not int or queue_id < 0):
            raise InvalidQueueError(f"queue id must be an integer >= 0, got {queue_id!r}",
                                    topic=topic)
        if sharding_key is not None and not isinstance(sharding_key, str):
            raise InvalidQueueError(f"sharding key must be a str, got {sharding_key!r}",
                                    topic=topic)
        unique_key = message.unique_key or self._keys.next()
        properties = _properties_text(message, unique_key, self._context.wire(topic))
        delay = (message.properties or {}).get(PROPERTY_DELAY)
        delay_level = min(int(delay), DELAY_LEVEL_MAX) if delay and delay.isdigit() else 0
        return Outgoing(message, self._context.wire(topic), body, properties, unique_key,
                        delay_level, queue_id, sharding_key)

    # -- routing and queue choice ----------------------------------------------------------

    def _route(self, outgoing: Outgoing, refresh: bool) -> tuple[TopicRoute, bool]:
        """The topic's route, or TBW102's when no name server knows it (True). Neither known:
        ``TopicNotFoundError`` when the name servers know a broker with a master (the topic
        does not exist and is not created on first send), else ``RouteNotFoundError`` (no
        broker registered now: every route is missing, a broker outage, not the topic)."""
        routes = self._context.routes
        try:
            return routes.wire_route(outgoing.wire_topic, refresh=refresh), False
        except RouteNotFoundError:
            try:
                return routes.wire_route(AUTO_CREATE_TOPIC, refresh=refresh), True
            except RouteNotFoundError:
                if not routes.cluster_info().masters():
                    raise RouteNotFoundError(
                        f"no route for topic {outgoing.message.topic!r}: the name servers "
                        "know no broker with a master now", topic=outgoing.wire_topic) from None
                raise TopicNotFoundError(
                    f"topic {outgoing.message.topic!r} does not exist and the cluster does not "
                    "create topics on first send: create it first (create_topic)",
                    topic=outgoing.message.topic) from None

    def _choose(self, route: TopicRoute, outgoing: Outgoing, avoid: set[str]) -> int:
        """The global queue id for ``outgoing`` (``avoid``: broker names that just failed)."""
        topic = outgoing.message.topic
        writable = route.writable
        if not writable:
            raise RouteNotFoundError(f"topic {topic!r} has no writable queue with a master "
                                     "now", topic=route.topic)
        if outgoing.queue_id is not None:
            if outgoing.queue_id not in writable:
                raise InvalidQueueError(
                    f"queue id {outgoing.queue_id} is not a writable queue of topic {topic!r} "
                    f"(writable: {_ranges(list(writable))})", topic=topic)
            return outgoing.queue_id
        if outgoing.sharding_key is not None:
            return writable[sharding_queue(outgoing.sharding_key, len(writable))]
        with self._lock:
            turns = self._turns.setdefault(route.topic, itertools.count(random.randrange(64)))
        turn = next(turns)
        candidates = [index for index in writable
                      if route.queues[index].broker_name not in avoid] or writable
        return candidates[turn % len(candidates)]

    # -- calls -----------------------------------------------------------------------------

    def _send_alone(self, outgoing: Outgoing, after: SendAlone = FAIL_OVER) -> SendResult:
        result = self._attempts([outgoing], set(after.avoid), after.attempts)[0]
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, SendResult)
        return result

    def _write_batch(self, batch: list[Slot], done: Callable[[], None]) -> None:
        """Write one SEND(_BATCH) for ``batch`` and return at once; the connection's reader
        finishes every slot when the answer comes (``_deliver``), and ``done`` runs once the
        call is over (a forgotten call is over too). Never raises: a slot whose send cannot
        be written here is finished with ``SEND_ALONE`` (its sender then sends it alone, with
        the failover of ``_attempts``) or with the error."""
        items = [slot.outgoing for slot in batch]
        try:
            route, via_default = self._route(items[0], refresh=False)
            if via_default:  # a topic being created: alone, so the route is refetched
                Slot.finish_all(batch, FAIL_OVER)
                done()
                return
            index = self._choose(route, items[0], set())
            ref = route.queues[index]
            address = route.master(ref.broker_name)
            assert address is not None  # writable queues have a master
            connection = self._context.connections.get(address)
            pending = connection.call_async(self._request(ref, items))
        except BrokerUnavailableError:  # name server or broker unreachable: fail over alone
            Slot.finish_all(batch, FAIL_OVER)
            done()
            return
        except Exception as error:
            Slot.finish_all(batch, error)
            done()
            return

        def forget() -> None:
            connection.forget(pending)
            done()

        for slot in batch:
            slot.forget = forget
        pending.add_done_callback(
            lambda future: self._deliver(batch, future, address, index, route, done))

    def _deliver(self, batch: list[Slot], future: PendingCall, address: str,
                 index: int, route: TopicRoute, done: Callable[[], None]) -> None:
        """The answer to a written batch, on the connection's reader thread: finish each slot,
        then end the call (which may write the sends queued behind it, on this thread)."""
        try:
            self._finish(batch, future, address, index, route)
        finally:
            done()

    def _finish(self, batch: list[Slot], future: PendingCall, address: str,
                index: int, route: TopicRoute) -> None:
        items = [slot.outgoing for slot in batch]
        outcomes: list[object]
        try:
            answer = future.result()
            if answer.code in RETRY_CODES:
                self._context.routes.invalidate(items[0].message.topic)
                broker = route.queues[index].broker_name
                outcomes = [SendAlone(frozenset({broker}), 1)] * len(batch)
            elif answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and len(batch) > 1:
                self._batch_supported = False
                outcomes = [FAIL_OVER] * len(batch)
            else:
                outcomes = self._results(answer, items, address, index, False, route)
        except Exception as error:  # the connection failed after the write: effect unknown
            outcomes = [error] * len(batch)
        for slot, outcome in zip(batch, outcomes, strict=True):
            slot.finish(outcome)

    def _attempts(self, batch: list[Outgoing], avoid: set[str], first: int = 0) -> list[object]:
        """Send ``batch`` in one call, on another broker after a retryable failure."""
        failure: Exception | None = None
        for attempt in range(first, SEND_ATTEMPTS):
            route, via_default = self._route(batch[0], refresh=attempt > 0)
            index = self._choose(route, batch[0], avoid)
            ref = route.queues[index]
            address = route.master(ref.broker_name)
            assert address is not None  # writable queues have a master
            try:
                answer = self._call(address, ref, batch)
            except ConnectFailedError as error:
                failure = error
                avoid.add(ref.broker_name)
                continue
            if answer.code in RETRY_CODES:
                failure = _answer_error(answer, batch[0], address)
                avoid.add(ref.broker_name)
                self._context.routes.invalidate(batch[0].message.topic)
                continue
            if via_default:
                self._context.routes.invalidate(batch[0].message.topic)
            return self._results(answer, batch, address, index, via_default, route)
        assert failure is not None
        raise failure

    def _call(self, address: str, ref: QueueRef, batch: list[Outgoing]) -> RemotingCommand:
        return self._context.broker_call(address, self._request(ref, batch))

    def _request(self, ref: QueueRef, batch: list[Outgoing]) -> RemotingCommand:
        """SEND_MESSAGE_V2 for one message, SEND_BATCH_MESSAGE for several (header fields
        written as wire strings here: this is the hot path)."""
        first = batch[0]
        message = first.message
        fields = {
            "a": self._group, "b": first.wire_topic, "c": AUTO_CREATE_TOPIC,
            "d": _DEFAULT_QUEUE_NUMS_TEXT, "e": str(ref.queue_id),
            "f": str(message.sys_flag & ~0x30), "g": str(_born_ms(first, self._context)),
            "h": str(message.flag), "j": str(message.reconsume_count), "k": "false",
            "n": ref.broker_name,
        }
        if len(batch) == 1:
            fields["i"], fields["m"] = first.properties, "false"
            code, body = RequestCode.SEND_MESSAGE_V2, first.body
        else:
            fields["m"] = "true"
            code = RequestCode.SEND_BATCH_MESSAGE
            body = b"".join(outgoing.entry() for outgoing in batch)
        return RemotingCommand(code=code, opaque=0, ext_fields=fields, body=body)

    def _results(self, answer: RemotingCommand, batch: list[Outgoing], address: str,
                 index: int, via_default: bool, route: TopicRoute) -> list[object]:
        status = STATUS_BY_CODE.get(answer.code)
        if status is None:
            return [_answer_error(answer, batch[0], address)] * len(batch)
        fields = answer.fields
        msg_ids = fields.get_str("msgId", max_chars=1 << 20).split(",")
        first_offset = fields.get_int("queueOffset")
        if len(msg_ids) != len(batch):
            raise RemotingResponseError(f"send of {len(batch)} messages answered with "
                                        f"{len(msg_ids)} message ids", code=answer.code,
                                        address=address)
        if via_default:  # the numbering of the topic's own route, now that it exists
            index = self._global_id_after_create(batch[0], route.queues[index])
        now_ms = self._context.clock.now_ms()
        return [_send_result(outgoing, index, msg_id, first_offset + position, status,
                             now_ms)
                for position, (outgoing, msg_id) in enumerate(zip(batch, msg_ids, strict=True))]

    def _global_id_after_create(self, outgoing: Outgoing, ref: QueueRef) -> int:
        try:
            return self._context.routes.wire_route(outgoing.wire_topic, refresh=True).global_id(
                ref.broker_name, ref.queue_id)
        except (RouteNotFoundError, KeyError, BrokerUnavailableError):
            return ref.queue_id  # the route is not registered yet: the broker's own number


def _entry_size(body_bytes: int, properties_bytes: int) -> int:
    """The size of one entry of a batch body (``Outgoing.entry``)."""
    return _BATCH_ENTRY_HEAD.size + body_bytes + _PROPERTIES_LENGTH.size + properties_bytes


def _batch_problem(batch: list[Outgoing]) -> str | None:
    """Why these checked messages cannot be one SEND_BATCH_MESSAGE, or None: the broker's
    batch rules (``batch_shape_problem``) on the encoded batch, properties included, as
    RocketMQ brokers count it against 4 MiB; then no retry topic (all share the first's)."""
    if problem := batch_shape_problem(
            (outgoing.message.topic, bool(outgoing.delay_level),
             _entry_size(len(outgoing.body), len(outgoing.properties.encode("utf-8"))))
            for outgoing in batch):
        return problem
    if not batch[0].batchable:
        return (f"messages to {batch[0].message.topic!r} cannot be sent in a batch: send them "
                "one by one")
    return None


def _properties_text(message: Message, unique_key: str, wire_topic: str) -> str:
    properties: dict[str, str] = {}
    for name, value in (message.properties or {}).items():
        if value is None:
            continue
        if problem := property_name_problem(name):
            raise InvalidMessageError(problem, topic=message.topic)
        properties[name] = str(value)
    cancels = properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
    if cancels is not None and "+" not in cancels:  # Apache RocketMQ matches "topic+UNIQ_KEY",
        # with the topic as it is stored (the namespaced name)
        properties[PROPERTY_TIMER_DEL_UNIQKEY] = f"{wire_topic}+{cancels}"
    keys = message.keys_list()
    if keys:
        properties["KEYS"] = " ".join(keys)
    if message.tags:
        properties["TAGS"] = message.tags
    properties["UNIQ_KEY"] = unique_key
    try:
        encoded = encode_properties(properties)
    except ValueError as error:
        raise InvalidMessageError(str(error), topic=message.topic) from error
    if len(encoded) > PROPERTIES_SIZE_MAX_BYTES:
        raise PropertiesTooLargeError(
            f"encoded properties are {len(encoded):,} bytes; the record format allows "
            f"{PROPERTIES_SIZE_MAX_BYTES:,}: shorten keys, tags or properties",
            setting="properties (format limit, not configurable)", topic=message.topic)
    return encoded.decode("utf-8")


def _born_ms(outgoing: Outgoing, context: ClientContext) -> int:
    born = outgoing.message.born_timestamp_ms
    return context.clock.now_ms() if born is None else born


def _send_result(outgoing: Outgoing, index: int, msg_id: str, queue_offset: int,
                 status: PutStatus, now_ms: int) -> SendResult:
    level = outgoing.delay_level
    stored_topic, stored_queue_id = (DELAY_TOPIC, level - 1) if level else (
        outgoing.message.topic, index)
    return SendResult(
        topic=outgoing.message.topic, queue_id=index, stored_topic=stored_topic,
        stored_queue_id=stored_queue_id, queue_offset=queue_offset,
        log_position=_log_position(msg_id), offset_msg_id=msg_id,
        unique_key=outgoing.unique_key, store_timestamp_ms=now_ms, delay_level=level,
        status=status)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _log_position(msg_id: str) -> int:
    """The log position in an offsetMsgId: its last 16 hex digits (a signed 64-bit number),
    without decoding the host; anything else goes through ``decode_offset_msg_id``, which
    raises ``ValueError`` naming the problem."""
    if len(msg_id) in (32, 56) and _HEX_DIGITS.issuperset(msg_id):
        position = int(msg_id[-16:], 16)
        if position < 2**63:
            return position
    return decode_offset_msg_id(msg_id)[1]


def _answer_error(answer: RemotingCommand, outgoing: Outgoing, address: str) -> Exception:
    return response_error(f"send to topic {outgoing.message.topic!r}", answer, address=address,
                          topic=outgoing.message.topic)


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) else str(ids)
