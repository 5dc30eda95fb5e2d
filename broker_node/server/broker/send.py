"""Producer requests: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310, one-letter keys),
SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36), and half messages (a send with
``TRAN_MSG=true`` or the PREPARED transaction type; END_TRANSACTION 37 is ``transactions``).

A send is ``Broker.send`` with the queue the client chose (a negative queue id lets the broker
pick), so every rule of a local send applies (names, sizes, the empty body, topic permissions,
auto-creation, ``DELAY`` levels, timers — ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` /
``TIMER_DELAY_MS``, beyond ``timerMaxDelaySec`` answered 13 as RocketMQ's
WHEEL_TIMER_MSG_ILLEGAL —, disk back-pressure); its errors map to response codes in
``handlers.code_for_error`` (13 MESSAGE_ILLEGAL, 16 NO_PERMISSION, 2 SYSTEM_BUSY …). The
broker's internal topics (``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_wheel_timer``, ``RMQ_SYS_*``)
answer 16 NO_PERMISSION, as RocketMQ's "sending message to topic is forbidden". A send to
``%RETRY%group`` (the Java push consumer's fallback when send-back fails) whose
``reconsumeTimes`` reached its maximum goes to ``%DLQ%group`` queue 0 instead, as in RocketMQ.

The response carries, in its extFields (reference §1.4): ``msgId`` (the offsetMsgId; for a batch
the comma-joined offsetMsgIds), ``queueId``, ``queueOffset`` (a batch: its first entry's),
``transactionId`` (the UNIQ_KEY), ``MSG_REGION`` and ``TRACE_ON``. Stored but unconfirmed
writes answer 10 FLUSH_DISK_TIMEOUT / 12 FLUSH_SLAVE_TIMEOUT / 11 SLAVE_NOT_AVAILABLE with the
same fields (RocketMQ's clients read these as send statuses).

A batch is validated whole (every entry becomes a ``Message`` first), then stored entry by entry
into one queue: entries are not atomic as a group (a disk-full refusal mid-batch leaves the
earlier entries stored; the answer is then the refusal, and a retry stores those again).

A half message (``Broker.send_half``, producer group = its ``PGROUP`` property, else the
header's ``producerGroup``) answers as a send does, with ``queueOffset`` its offset in the half
topic (END_TRANSACTION's ``tranStateTableOffset``) and ``msgId`` its offsetMsgId (whose
commit-log offset END_TRANSACTION names); a batch of them is refused 13 MESSAGE_ILLEGAL, as
RocketMQ's clients never send one. Thread-safety: as ``Broker``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from postbox.network.protocol.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from postbox.network.protocol.wire import HeaderFields, RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.broker.timer_messages import TIMER_PROPERTIES
from postbox.storage_engine.contract.message import Message, PutStatus
from postbox.storage_engine.contract.model import SendResult
from postbox.storage_engine.errors import CorruptionError, MessageNotFoundError
from postbox.storage_engine.formats import (
    PROPERTY_DELAY,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    SYSFLAG_TRANSACTION_MASK,
)
from postbox.storage_engine.formats.topic_names import (
    RETRY_TOPIC_PREFIX,
    dead_letter_topic,
    is_internal_topic,
    is_retry_topic,
    is_system_group_topic,
)

from ..errors import RequestRefusedError
from ..handlers import HandlerTable
from ..session import Session
from ..workers import SEND_LANE
from .records import decode_batch, message_from_wire, properties_from_wire

MSG_REGION = "DefaultRegion"
_V2_KEYS = {"producerGroup": "a", "topic": "b", "defaultTopic": "c",
            "defaultTopicQueueNums": "d", "queueId": "e", "sysFlag": "f", "bornTimestamp": "g",
            "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
            "maxReconsumeTimes": "l", "batch": "m", "brokerName": "n"}
_PUT_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
INT32_MAX = 2**31 - 1
SCHEDULING_PROPERTIES = (PROPERTY_DELAY, *TIMER_PROPERTIES)
REAL_TOPIC_PROPERTIES = (PROPERTY_RETRY_TOPIC, PROPERTY_REAL_TOPIC)
"""Properties naming the topic a retried or dead-lettered message goes back to."""


_V1_KEYS = {name: name for name in _V2_KEYS}


class _SendHeader:
    """A send's header read by its V1 field names, whatever keys the request used."""

    __slots__ = ("_fields", "_keys")

    def __init__(self, request: RemotingCommand) -> None:
        self._fields = request.fields
        self._keys = _V1_KEYS if request.code == RequestCode.SEND_MESSAGE else _V2_KEYS

    def get_str(self, name: str, default: Any = HeaderFields._REQUIRED, **limits: Any) -> Any:
        return self._fields.get_str(self._keys[name], default, **limits)

    def get_int(self, name: str, default: Any = HeaderFields._REQUIRED, low: int = -(2**63),
            high: int = INT32_MAX) -> Any:
        return self._fields.get_int(self._keys[name], default, low=low, high=high)


class SendHandlers:
    """The producer-side handlers over one broker."""

    def __init__(self, broker: Broker, stats: Any = None,
                 check_record_topic: Callable[[RemotingCommand, str], None] | None = None,
                 check_publish: Callable[[RemotingCommand, str], None] | None = None
                 ) -> None:
        self._broker = broker
        self._check_record_topic = check_record_topic or (lambda request, topic: None)
        self._check_publish = check_publish or (lambda request, topic: None)
        self._stats = stats  # ``record_put(count)`` (admin's runtime statistics), or None

    def register(self, table: HandlerTable, *, inline: bool) -> None:
        """Serve 10, 310, 320 and 36 (``inline``: the store does not block on a send)."""
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE):
            table.register(code, self.send, inline=inline, lane=SEND_LANE)
        table.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back, inline=inline,
                       lane=SEND_LANE)

    def send(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE."""
        header = _SendHeader(request)
        topic = header.get_str("topic", max_chars=255)
        if is_internal_topic(topic):
            raise RequestRefusedError(ResponseCode.NO_PERMISSION,
                                      f"sending message to topic {topic} is forbidden: it is "
                                      "an internal topic of the broker")
        queue_id = header.get_int("queueId", low=-1)
        sys_flag = header.get_int("sysFlag", low=0)
        properties = properties_from_wire(header.get_str("properties", None, max_chars=65536))
        half = bool(sys_flag & SYSFLAG_TRANSACTION_MASK or properties.get("TRAN_MSG") == "true")
        if half and request.code == RequestCode.SEND_BATCH_MESSAGE:
            raise RequestRefusedError(ResponseCode.MESSAGE_ILLEGAL,
                                      "a batch cannot hold transactional (half) messages")
        common = {"flag": header.get_int("flag", 0, low=-(2**31)),
                  "sys_flag": sys_flag,
                  "born_timestamp_ms": header.get_int("bornTimestamp", low=0, high=2**63 - 1),
                  "born_host": session.peer_address,
                  "reconsume_count": header.get_int("reconsumeTimes", 0, low=0)}
        self._check_real_topics(request, topic, properties)
        entries = (decode_batch(request.body) if request.code == RequestCode.SEND_BATCH_MESSAGE
                   else None)
        for entry in entries or ():
            self._check_real_topics(request, topic, entry.properties)
        topic, queue_id = self._retry_target(topic, queue_id, properties,
                                             common["reconsume_count"], header)
        chosen = None if queue_id < 0 else queue_id
        if half:
            group = properties.get("PGROUP") or header.get_str("producerGroup", max_chars=255)
            results = [self._broker.send_half(message_from_wire(
                topic, request.body, properties, **common), group, queue_id=chosen)]
        elif entries is not None:
            messages = [message_from_wire(topic, entry.body, {**entry.properties},
                                          **{**common, "flag": entry.flag})
                        for entry in entries]
            results = self._send_all(messages, chosen)
        else:
            results = [self._broker.send(message_from_wire(topic, request.body, properties,
                                                           **common), queue_id=chosen)]
        if self._stats is not None:
            self._stats.record_put(len(results))
        return _send_response(request, results)

    def _check_real_topics(self, request: RemotingCommand, topic: str,
                           properties: Any) -> None:
        """PUB on every other topic a real-topic property of the message names (the access
        hook's ``check_publish``): a client cannot plant, in a retry topic it may write, a
        message that a retry or a dead-letter resend would publish into a topic it may not."""
        for name in REAL_TOPIC_PROPERTIES:
            named = properties.get(name)
            if named and named != topic:
                self._check_publish(request, named)

    def _send_all(self, messages: list[Message], queue_id: int | None) -> list[SendResult]:
        """A batch in one append at consecutive offsets (the client numbers its results from
        the first); one carrying a ``DELAY`` level or a timer, which RocketMQ's clients never
        batch, is sent message by message to the first one's queue."""
        if not any(name in (message.properties or {}) for message in messages
                   for name in SCHEDULING_PROPERTIES):
            return self._broker.send_batch(messages, queue_id=queue_id)
        first = self._broker.send(messages[0], queue_id=queue_id)
        return [first] + [self._broker.send(message, queue_id=first.queue_id)
                          for message in messages[1:]]

    def _retry_target(self, topic: str, queue_id: int, properties: dict[str, str],
                      reconsume_count: int, header: _SendHeader) -> tuple[str, int]:
        """``%DLQ%group`` queue 0 for a retry-topic send past its maximum, else as asked."""
        if not is_retry_topic(topic):
            return topic, queue_id
        group = topic[len(RETRY_TOPIC_PREFIX):]
        limit = header.get_int("maxReconsumeTimes", None, low=-1)
        if limit is None or limit < 0:
            limit = self._broker.subscription_group(group).retry_max_times
        if reconsume_count < limit:
            return topic, queue_id
        properties.pop(PROPERTY_DELAY, None)
        return dead_letter_topic(group), 0

    def send_back(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: the consumed message (by commit-log offset) to the group's
        retry topic with a delay level, or its dead-letter topic (reference §9.10)."""
        fields = request.fields
        position = fields.get_int("offset", low=0)
        group = fields.get_str("group", max_chars=255)
        delay_level = fields.get_int("delayLevel", low=-1, high=INT32_MAX)
        limit = fields.get_int("maxReconsumeTimes", None, low=-1, high=INT32_MAX)
        if request.version < 121 or (limit is not None and limit < 0):
            limit = None  # clients before V3_4_9 send no usable maximum (reference §9.4)
        try:
            view = self._broker.store.read_message(position)
        except (MessageNotFoundError, CorruptionError) as error:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR,
                                      f"look message by offset failed, {position}: "
                                      f"{error}") from error
        original = view.properties.get(PROPERTY_RETRY_TOPIC, view.topic)
        if not is_system_group_topic(original):  # a group's own topics: its SUB right covers
            self._check_record_topic(request, original)
        reason = fields.get_str("dlqReason", None, max_chars=4096)  # Postbox: DLQ_REASON
        self._broker.send_back(group, view, delay_level=delay_level, max_reconsume_times=limit,
                               reason=reason)
        return request.response(ResponseCode.SUCCESS)


def _send_response(request: RemotingCommand, results: list[SendResult]) -> RemotingCommand:
    first = results[0]
    code = ResponseCode.SUCCESS
    for result in results:
        code = max(code, _PUT_STATUS_CODES[result.status])
    fields = {"msgId": ",".join(result.offset_msg_id for result in results),
              "queueId": str(first.queue_id), "queueOffset": str(first.queue_offset),
              "MSG_REGION": MSG_REGION, "TRACE_ON": "true"}
    unique_keys = [result.unique_key for result in results if result.unique_key]
    if unique_keys:
        fields["transactionId"] = ",".join(unique_keys)
    return RemotingCommand(code=code, opaque=request.opaque, flag=FLAG_RESPONSE,
                           ext_fields=fields)  # already strings: no conversion pass
