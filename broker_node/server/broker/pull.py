"""PULL_MESSAGE (11): a read from one queue by offset, with tag filtering, an optional offset
commit and long polling.

Header (reference §2.2): consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag,
commitOffset, suspendTimeoutMillis; optional subscription, expressionType, maxMsgBytes.
``sysFlag`` bits: 0x1 commit ``commitOffset`` for the group first, 0x2 the pull may be held,
0x4 ``subscription``/``expressionType`` are in the request (else the subscription the group's
heartbeat registered applies: none answers 24 SUBSCRIPTION_NOT_EXIST, as RocketMQ). Only TAG
expressions are served (``a || b``, ``*``); SQL92 answers 1 SYSTEM_ERROR saying so. An unknown
topic answers 17 TOPIC_NOT_EXIST; a group that may not consume, or an unreadable topic, 16.

Answer: the store's result mapped as RocketMQ's ``PullMessageProcessor`` (FOUND 0;
NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING 20; NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE 21 when
the offset asked is not 0, else 19; OFFSET_FOUND_NULL, OFFSET_OVERFLOW_ONE 19;
OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL 21), the status name as remark, ``nextBeginOffset``,
``minOffset``, ``maxOffset`` and ``suggestWhichBrokerId`` always set, and as body the stored
records back to back, byte for byte. A batch is cut at ``maxMsgBytes`` (and at
``PULL_BODY_BYTES_MAX``), keeping at least one message; ``nextBeginOffset`` follows the last
one sent.

Long polling: a pull that would answer 19 with the suspend flag is parked
(``PullHoldService``), no thread held, for ``suspendTimeoutMillis`` (capped at the broker's
``long_polling_max_ms``), and answered when its queue grows or the time passes (19 then).
Thread-safety: as ``Broker``'s; a parked pull's answer is written from the hold service thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from postbox.network.protocol.codes import SERVER_VERSION, RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.contract.message import GetResult, GetStatus
from postbox.storage_engine.contract.rules import PULL_BATCH_MAX

from ..errors import RequestRefusedError
from ..handlers import HandlerTable, error_response
from ..session import Session
from .hold import ParkedPull, PullHoldService
from .records import encode_view

SYSFLAG_COMMIT_OFFSET = 0x1
SYSFLAG_SUSPEND = 0x2
SYSFLAG_SUBSCRIPTION = 0x4
PULL_BODY_BYTES_MAX = 8 * 1024 * 1024
"""Largest pull body (a client's frame limit is 16 MiB)."""
MAX_PARKED_PULLS = 10_000
INT32_MAX = 2**31 - 1

LITE_PULL_MESSAGE = 361
Subscriptions = Callable[[str, str], "tuple[str, str] | None"]
"""(group, topic) → the (expression, expression type) the group's heartbeat registered."""

_STATUS_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def pull_code(result: GetResult, offset: int) -> int:
    """The response code of a store result for a pull at ``offset``."""
    if result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _STATUS_CODES.get(result.status, ResponseCode.PULL_NOT_FOUND)


@dataclass(slots=True)
class _Pull:
    request: RemotingCommand
    session: Session
    group: str
    topic: str
    queue_id: int
    offset: int
    max_count: int
    max_bytes: int
    tags: str | None


class PullHandler:
    """PULL_MESSAGE over one broker, with its hold service."""

    def __init__(self, broker: Broker, subscriptions: Subscriptions, *,
                 max_parked: int = MAX_PARKED_PULLS, stats: Any = None) -> None:
        self._broker = broker
        self._stats = stats  # ``record_get(count)`` (admin's runtime statistics), or None
        self._subscriptions = subscriptions
        self._suspend_max_ms = broker.store.config.broker.long_polling_max_ms
        self.hold = PullHoldService(self._retry, broker.store.max_offset, max_parked)

    def register(self, table: HandlerTable) -> None:
        """Serve 11, and 361 LITE_PULL_MESSAGE (the same header and answer: RocketMQ 5's
        ``DefaultLitePullConsumer`` pulls with it), inline: a pull never blocks, a waiting one
        is parked."""
        table.register(RequestCode.PULL_MESSAGE, self.pull, inline=True)
        table.register(LITE_PULL_MESSAGE, self.pull, inline=True)

    def start(self) -> None:
        """Start the hold service and listen to the store's arrivals."""
        self.hold.start()
        self._broker.store.add_arrival_listener(self.hold.on_arrival)

    def stop(self) -> None:
        """Drop parked pulls and end the hold service's thread."""
        self.hold.stop()

    def pull(self, request: RemotingCommand, session: Session) -> RemotingCommand | None:
        """PULL_MESSAGE; None when the pull is parked (answered later)."""
        fields = request.fields
        sys_flag = fields.get_int("sysFlag", low=0, high=INT32_MAX)
        pull = self._read_pull(request, session, sys_flag)
        commit = fields.get_int("commitOffset", -1)
        suspend_ms = fields.get_int("suspendTimeoutMillis", 0, low=0)
        if sys_flag & SYSFLAG_COMMIT_OFFSET and commit >= 0:
            self._broker.commit_offset(pull.group, pull.topic, pull.queue_id, commit)
        result = self._read(pull)
        code = pull_code(result, pull.offset)
        if (code == ResponseCode.PULL_NOT_FOUND and sys_flag & SYSFLAG_SUSPEND and suspend_ms > 0
                and not request.is_oneway):
            timeout_ms = min(suspend_ms, self._suspend_max_ms)
            if self.hold.park((pull.topic, pull.queue_id), result.max_offset, timeout_ms, pull,
                              session):
                return None
        return self._answer(pull, result, code)

    def _read_pull(self, request: RemotingCommand, session: Session, sys_flag: int) -> _Pull:
        fields = request.fields
        group = fields.get_str("consumerGroup", max_chars=255)
        topic = fields.get_str("topic", max_chars=255)
        if sys_flag & SYSFLAG_SUBSCRIPTION:
            expression = fields.get_str("subscription", "*", max_chars=16384)
            kind = fields.get_str("expressionType", "TAG", max_chars=32)
        else:
            registered = self._subscriptions(group, topic)
            if registered is None:
                raise RequestRefusedError(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist: group {group} has no "
                    f"subscription to {topic} (send a heartbeat, or the subscription flag)")
            expression, kind = registered
        if kind.upper() != "TAG":
            raise RequestRefusedError(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {kind}: only TAG "
                "expressions are served")
        if self._broker.topic_config(topic) is None:
            raise RequestRefusedError(ResponseCode.TOPIC_NOT_EXIST,
                                      f"topic[{topic}] not exist, apply first please!")
        self._broker.subscription_group(group)  # 26 when it does not exist and cannot be made
        return _Pull(request, session, group, topic,
                     fields.get_int("queueId", low=0, high=INT32_MAX),
                     fields.get_int("queueOffset", low=0),
                     max(1, min(fields.get_int("maxMsgNums", low=0, high=INT32_MAX),
                                PULL_BATCH_MAX)),
                     fields.get_int("maxMsgBytes", PULL_BODY_BYTES_MAX, low=1, high=INT32_MAX),
                     expression)

    def _read(self, pull: _Pull) -> GetResult:
        return self._broker.pull(pull.group, pull.topic, pull.queue_id, pull.offset,
                                 pull.max_count, tags=pull.tags)

    def _answer(self, pull: _Pull, result: GetResult, code: int) -> RemotingCommand:
        body = b""
        next_offset = result.next_offset
        if code == ResponseCode.SUCCESS:
            limit = min(pull.max_bytes, PULL_BODY_BYTES_MAX)
            records: list[bytes] = []
            size = 0
            for view in result.messages:
                record = encode_view(view)
                if records and size + len(record) > limit:
                    next_offset = view.queue_offset
                    break
                records.append(record)
                size += len(record)
            body = b"".join(records)
            if self._stats is not None:
                self._stats.record_get(len(records))
        return pull.request.response(code, {
            "suggestWhichBrokerId": 0, "nextBeginOffset": next_offset,
            "minOffset": result.min_offset, "maxOffset": result.max_offset,
        }, body, remark=result.status.value)

    def _retry(self, parked: ParkedPull, final: bool) -> None:
        """Run a parked pull again (hold service thread) and answer it, or park it again."""
        pull: _Pull = parked.state
        if pull.session.closed:
            return
        try:
            result = self._read(pull)
            code = pull_code(result, pull.offset)
            if code == ResponseCode.PULL_NOT_FOUND and not final:
                remaining_ms = int((parked.deadline - time.monotonic()) * 1000)
                if remaining_ms > 0 and self.hold.park(parked.queue, result.max_offset,
                                                       remaining_ms, pull, pull.session):
                    return
            response = self._answer(pull, result, code)
        except Exception as error:  # answered like any failed request
            response = error_response(pull.request, error, pull.session.peer_address)
        response.version = SERVER_VERSION
        pull.session.send_response(response)
