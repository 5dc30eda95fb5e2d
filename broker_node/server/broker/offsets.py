"""Offsets and queue positions: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32); and the queries VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12).

QUERY_CONSUMER_OFFSET answers the committed offset; without one, 0 when the queue still starts
at 0 and its first message is young enough to be in memory (RocketMQ's rule, which the broker's
``start_offset`` applies) unless ``setZeroIfNotFound`` is false, else 22 QUERY_NOT_FOUND.
QUERY_MESSAGE searches the key index by key, or by UNIQ_KEY when ``_UNIQUE_KEY_QUERY`` is
``true`` (at most 32 then, RocketMQ's ``defaultQueryMaxNum``); nothing found answers 22.
VIEW_MESSAGE_BY_ID reads the record at a commit-log offset (1 SYSTEM_ERROR when there is none).
Bodies are stored records, byte for byte. Every name and queue id is validated by the broker
or the store's rules. Thread-safety: as ``Broker``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import HeaderFields, RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.contract.model import ConsumeFrom
from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import CorruptionError, MessageNotFoundError
from postbox.storage_engine.formats import INDEX_QUERY_RESULT_MAX

from ..errors import RequestRefusedError
from ..handlers import HandlerTable
from ..session import Session
from .records import encode_views

INT32_MAX = 2**31 - 1
UNIQUE_KEY_QUERY_MAX = 32


class OffsetHandlers:
    """Offsets, positions and queries over one broker."""

    def __init__(self, broker: Broker,
                 check_record_topic: Callable[[RemotingCommand, str], None] | None = None
                 ) -> None:
        self._broker = broker
        self._check_record_topic = check_record_topic or (lambda request, topic: None)
        self._store = broker.store

    def register(self, table: HandlerTable) -> None:
        """Serve 14, 15, 29, 30, 31, 32 inline, and the index queries 33, 12 on workers."""
        for code, handler in ((RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset),
                              (RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset),
                              (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset),
                              (RequestCode.GET_MAX_OFFSET, self.max_offset),
                              (RequestCode.GET_MIN_OFFSET, self.min_offset),
                              (RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_time)):
            table.register(code, handler, inline=True)
        table.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        table.register(RequestCode.QUERY_MESSAGE, self.query_message)

    def query_offset(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET."""
        fields = request.fields
        group = fields.get_str("consumerGroup", max_chars=255)
        topic, queue_id = _queue(fields)
        offset = self._broker.query_offset(group, topic, queue_id)
        if (offset is None and fields.get_bool("setZeroIfNotFound", True)
                and self._store.min_offset(topic, queue_id) <= 0
                and self._store.max_offset(topic, queue_id) > 0
                and self._broker.start_offset(group, topic, queue_id, ConsumeFrom.LAST) == 0):
            offset = 0
        if offset is None:
            raise RequestRefusedError(ResponseCode.QUERY_NOT_FOUND,
                                      f"Not found, group {group} has no offset on {topic} "
                                      f"queue {queue_id}")
        return request.response(ResponseCode.SUCCESS, {"offset": offset})

    def update_offset(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET (Java clients send it oneway)."""
        fields = request.fields
        group = fields.get_str("consumerGroup", max_chars=255)
        topic, queue_id = _queue(fields)
        offset = fields.get_int("commitOffset", low=0)
        self._broker.commit_offset(group, topic, queue_id, offset)
        return request.response(ResponseCode.SUCCESS)

    def search_offset(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first offset stored at or after the time."""
        fields = request.fields
        topic, queue_id = _queue(fields)
        timestamp_ms = fields.get_int("timestamp", low=0)
        offset = self._store.offset_by_time(topic, queue_id, timestamp_ms)
        return request.response(ResponseCode.SUCCESS, {"offset": offset})

    def max_offset(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """GET_MAX_OFFSET."""
        topic, queue_id = _queue(request.fields)
        return request.response(ResponseCode.SUCCESS,
                                {"offset": self._store.max_offset(topic, queue_id)})

    def min_offset(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """GET_MIN_OFFSET."""
        topic, queue_id = _queue(request.fields)
        return request.response(ResponseCode.SUCCESS,
                                {"offset": self._store.min_offset(topic, queue_id)})

    def earliest_time(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """GET_EARLIEST_MSG_STORETIME: store time of the queue's first message (-1: none)."""
        topic, queue_id = _queue(request.fields)
        start = self._store.min_offset(topic, queue_id)
        result = self._store.get_message("", topic, queue_id, start, 1) if (
            self._store.max_offset(topic, queue_id) > start) else None
        timestamp = result.messages[0].store_timestamp_ms if result and result.messages else -1
        return request.response(ResponseCode.SUCCESS, {"timestamp": timestamp})

    def view_message(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the record at a commit-log offset."""
        position = request.fields.get_int("offset", low=0)
        try:
            view = self._store.read_message(position)
        except (MessageNotFoundError, CorruptionError) as error:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR,
                                      f"can not find message by the offset, {position}: "
                                      f"{error}") from error
        self._check_record_topic(request, view.topic)
        return request.response(ResponseCode.SUCCESS, body=encode_views([view]))

    def query_message(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """QUERY_MESSAGE by key, or by UNIQ_KEY (``_UNIQUE_KEY_QUERY``)."""
        fields = request.fields
        topic = validate_topic(fields.get_str("topic", max_chars=255))
        key = fields.get_str("key", max_chars=4096)
        if fields.get_bool("_UNIQUE_KEY_QUERY", False):
            views = self._store.query_by_unique_key(topic, key)[:UNIQUE_KEY_QUERY_MAX]
        else:
            max_num = fields.get_int("maxNum", low=1, high=INT32_MAX)
            views = self._store.query_by_key(
                topic, key, min(max_num, INDEX_QUERY_RESULT_MAX),
                fields.get_int("beginTimestamp", 0, low=0),
                fields.get_int("endTimestamp", 2**62, low=0))
        if not views:
            raise RequestRefusedError(ResponseCode.QUERY_NOT_FOUND,
                                      "can not find message, maybe time range not correct")
        last = max(view.store_timestamp_ms for view in views)
        return request.response(ResponseCode.SUCCESS, {
            "indexLastUpdateTimestamp": last,
            "indexLastUpdatePhyoffset": max(view.log_position for view in views),
        }, encode_views(views))


def _queue(fields: HeaderFields) -> tuple[str, int]:
    return (validate_topic(fields.get_str("topic", max_chars=255)),
            fields.get_int("queueId", low=0, high=INT32_MAX))
