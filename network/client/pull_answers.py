"""PULL_MESSAGE requests and answers: the header a pull sends and the ``GetResult`` it becomes.

Request (``reference/rocketmq-remoting.md`` §2.2): the subscription travels in every pull
(sysFlag 0x4, ``TAG`` expression), so a broker filters by it whatever the group registered;
offsets are committed separately (``commit_offset``), never piggybacked; sysFlag 0x2 asks the
broker to hold the pull (long polling) for ``suspendTimeoutMillis``.

Answer → ``GetResult``, as the embedded broker returns it: the broker names its store's status
in the remark (``FOUND``, ``NO_MATCHED_MESSAGE``, ...), which is taken when it is one of
``GetStatus``; otherwise the code decides (0 FOUND, 19 nothing new, 20 nothing matched, 21 the
offset moved: too small or too big by ``minOffset``/``maxOffset``). A FOUND answer whose
records all fail the exact tag check (a broker filters by tag hash only) becomes
NO_MATCHED_MESSAGE with the broker's ``nextBeginOffset``, as the embedded store reports
messages skipped by its filter. Any other code is a broker error (``broker_errors``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from postbox.storage_engine.contract.message import GetResult, GetStatus
from postbox.storage_engine.formats import TagFilter

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .broker_errors import response_error
from .records import decode_records, subscription_expression

SYSFLAG_SUSPEND = 0x2
SYSFLAG_SUBSCRIPTION = 0x4
PULL_CODES = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                        ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED})
_STATUS_BY_NAME = {status.value: status for status in GetStatus}


def pull_request(group: str, topic: str, broker_name: str, queue_id: int, offset: int,
                 max_count: int, tags: str | None, suspend_ms: int,
                 sub_version: int) -> RemotingCommand:
    """A PULL_MESSAGE for wire names and a broker's own queue id."""
    sys_flag = SYSFLAG_SUBSCRIPTION | (SYSFLAG_SUSPEND if suspend_ms > 0 else 0)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_count, "sysFlag": sys_flag, "commitOffset": 0,
        "suspendTimeoutMillis": max(0, suspend_ms), "subscription":
            subscription_expression(tags), "subVersion": sub_version, "expressionType": "TAG",
        "bname": broker_name,
    })


def is_nothing_new(answer: RemotingCommand) -> bool:
    """Whether a pull answer says "nothing new yet" (a long poll that found nothing)."""
    return answer.code == ResponseCode.PULL_NOT_FOUND


def get_result(answer: RemotingCommand, *, offset: int, queue_id: int, tags: str | None,
               address: str, topic: str,
               unwrap: Callable[[str], str] | None = None) -> GetResult:
    """The ``GetResult`` of a pull answer (see the module docstring).

    Raises:
        RemotingClientError: the broker refused the pull (a subclass by code), or its records
            do not decode.
    """
    code = answer.code
    if code not in PULL_CODES:
        if code == ResponseCode.TOPIC_NOT_EXIST:  # the embedded store's unknown queue
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, [], 0, 0, 0)
        raise response_error(f"pull of {topic!r} queue {queue_id} at offset {offset}", answer,
                             address=address, topic=topic)
    fields = answer.fields
    next_offset = fields.get_int("nextBeginOffset", offset)
    min_offset = fields.get_int("minOffset", 0)
    max_offset = fields.get_int("maxOffset", 0)
    if code == ResponseCode.SUCCESS:
        views = decode_records(answer.body, queue_id, unwrap=unwrap)
        tag_filter = TagFilter.parse(tags)
        if tag_filter is not None:
            views = [view for view in views if tag_filter.accepts(view.tags)]
        if views:
            return GetResult(GetStatus.FOUND, views, next_offset, min_offset, max_offset)
        return GetResult(GetStatus.NO_MATCHED_MESSAGE, [], next_offset, min_offset, max_offset)
    status = _status(answer, offset, next_offset, min_offset, max_offset)
    return GetResult(status, [], next_offset, min_offset, max_offset)


def _status(answer: RemotingCommand, offset: int, next_offset: int, min_offset: int,
            max_offset: int) -> GetStatus:
    """The store status behind a code other than SUCCESS."""
    named = _STATUS_BY_NAME.get((answer.remark or "").strip())
    if named is not None and named is not GetStatus.FOUND:
        return named
    code = answer.code
    if code == ResponseCode.PULL_NOT_FOUND:
        if next_offset > offset:  # OFFSET_FOUND_NULL past a hole: step over it
            return GetStatus.NO_MATCHED_MESSAGE
        return GetStatus.NO_MESSAGE_IN_QUEUE if max_offset == 0 else GetStatus.OFFSET_OVERFLOW_ONE
    if code == ResponseCode.PULL_RETRY_IMMEDIATELY:
        return GetStatus.NO_MATCHED_MESSAGE
    if offset < min_offset:  # PULL_OFFSET_MOVED (and RocketMQ 5's OFFSET_RESET)
        return GetStatus.OFFSET_TOO_SMALL
    return GetStatus.OFFSET_OVERFLOW_BADLY


__all__ = ["PULL_CODES", "SYSFLAG_SUBSCRIPTION", "SYSFLAG_SUSPEND", "get_result",
           "is_nothing_new", "pull_request"]
