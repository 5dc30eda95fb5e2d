"""``MessageReader``: every read path of the store (pull by queue offset, by position, by id,
by key, by unique key, by time).

Reads never take the put lock. A pulled record is checked against its consume-queue unit (magic,
size) and its body CRC. A pull skips a unit whose record fails those checks, or was set aside by
``postbox store repair``, with an alert in the log (``[read] [corruption]`` / ``[read]
[set-aside]``) and a count in ``skipped_damaged``: a consumer moves past it instead of failing
at that offset forever. Reads by position or id raise ``CorruptionError`` with the position.
Hash collisions from the key index are filtered by the real key and topic. Thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from ..contract.message import GetResult, GetStatus
from ..errors import CorruptionError, InvalidMessageIdError, MessageNotFoundError
from ..formats import (
    FILLER_UNIT_SIZE,
    INDEX_QUERY_RESULT_MAX,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK,
    MessageView,
    RecordKind,
    TagFilter,
    check_record,
    decode_offset_msg_id,
    is_ext_address,
)
from ..formats.engine import masked_crc32
from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet
from .key_index import KeyIndex
from .repair import SET_ASIDE_TOPIC, set_aside_spans

log = logging.getLogger(__name__)

UNIQUE_KEY_QUERY_MAX = 32  # RocketMQ defaultQueryMaxNum
_COLLISION_HEADROOM = 4  # ask the index for this many times the wanted count, then filter


class MessageReader:
    """Read side of the store."""

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueSet,
                 key_index: KeyIndex) -> None:
        self._log = commit_log
        self._queues = queues
        self._key_index = key_index
        self.skipped_damaged = 0  # queue units skipped because their record is damaged

    def get_message(self, topic: str, queue_id: int, offset: int, max_count: int,
                    tag_filter: TagFilter | None) -> GetResult:
        """Pull up to ``max_count`` messages from one queue starting at ``offset``."""
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, [], 0, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        if max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, min_offset, max_offset)
        if offset < min_offset:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, min_offset, max_offset)
        if offset > max_offset:
            next_offset = min_offset if min_offset == 0 else max_offset
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], next_offset, min_offset,
                             max_offset)
        messages: list[MessageView] = []
        next_offset = offset
        removed = 0
        log_min = self._log.min_position
        while next_offset < max_offset and len(messages) < max_count:
            units = queue.read_units(next_offset, min(max_count - len(messages),
                                                      max_offset - next_offset))
            if not units:
                break
            for position, size, code in units:
                next_offset += 1
                if size == FILLER_UNIT_SIZE and position == 0:
                    continue
                if position < log_min:
                    removed += 1
                    continue
                if tag_filter is not None and not is_ext_address(code) and (
                        not tag_filter.accepts_code(code)):
                    continue
                view = self._read_unit(position, size, topic, queue_id, next_offset - 1)
                if view is None:
                    continue  # damaged or set aside: skipped with an alert
                if tag_filter is not None and not tag_filter.accepts(view.tags):
                    continue
                messages.append(view)
        if messages:
            status = GetStatus.FOUND
        else:
            status = GetStatus.MESSAGE_WAS_REMOVING if removed else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, next_offset, min_offset, max_offset)

    def _read_unit(self, position: int, size: int, topic: str, queue_id: int,
                   offset: int) -> MessageView | None:
        """The record a consume-queue unit names, checked against the unit and its body CRC.

        None when it cannot be delivered: set aside by repair, or damaged. Either is logged
        (the alert) and counted; the pull goes on past it, so no consumer is stuck there.
        """
        try:
            view = self._log.read_unchecked(position)
            if view.store_size != size or view.log_position != position:
                raise CorruptionError(f"record at position={position} does not match its "
                                      f"consume-queue unit (size {size})")
            if masked_crc32(view.body) != view.body_crc:
                raise CorruptionError(f"body CRC mismatch at position={position}")
            if view.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK:
                raise CorruptionError(f"position={position} holds a placeholder record")
        except CorruptionError as error:
            self._skip_damaged(position, topic, queue_id, offset, str(error))
            return None
        return view

    def _skip_damaged(self, position: int, topic: str, queue_id: int, offset: int,
                      reason: str) -> None:
        """Log an alert: a unit whose record cannot be delivered (skip policy, docs/store.md)."""
        self.skipped_damaged += 1
        where = f"topic={topic} queue={queue_id} offset={offset} position={position}"
        root = self._log.segments.directory.parent
        for start, end, bytes_file in set_aside_spans(root):
            if start <= position < end:
                log.warning("[read] [set-aside] %s: the record was set aside by `postbox store "
                            "repair` (its bytes: %s); skipped", where, bytes_file)
                return
        log.error("[read] [corruption] %s in segment %s: %s; skipped so consumers move on "
                  "(the bytes stay on disk: `postbox store verify` names the damage, `postbox "
                  "store repair --store %s` sets it aside)", where, self._segment_path(position),
                  reason, root)

    def _segment_path(self, position: int) -> str | None:
        segment = self._log.segments.find(position)
        return str(segment.path) if segment is not None else None

    def read_message(self, position: int) -> MessageView:
        """The record at ``position`` (CRC checked)."""
        if not self._log.min_position <= position < self._log.max_position:
            raise MessageNotFoundError(
                f"position={position} is outside the commit log "
                f"[{self._log.min_position}, {self._log.max_position})", log_position=position)
        return self._not_set_aside(self._log.read(position))

    def _not_set_aside(self, view: MessageView) -> MessageView:
        """``view``, unless it is a placeholder repair wrote in place of a damaged span."""
        if view.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK and \
                SET_ASIDE_TOPIC.startswith(view.topic):
            position = view.log_position
            files = [f for start, end, f in set_aside_spans(self._log.segments.directory.parent)
                     if start <= position < end]
            raise CorruptionError(
                f"the record at position={position} was damaged and set aside by `postbox "
                f"store repair` (its bytes: {files[0] if files else 'see damaged/'})",
                log_position=position, path=self._segment_path(position))
        return view

    def view_message_by_id(self, msg_id: str) -> MessageView:
        """The record an offsetMsgId names.

        Raises:
            InvalidMessageIdError: the id is malformed.
            MessageNotFoundError: no record starts at the id's position, or it is another
                store's record.
            CorruptionError: a record starts there but its body CRC does not match.
        """
        try:
            host, position = decode_offset_msg_id(msg_id)
        except ValueError as error:
            raise InvalidMessageIdError(str(error)) from error
        if not self._log.min_position <= position < self._log.max_position or (
                not self._log.has_record_at(position)):
            raise MessageNotFoundError(f"no message {msg_id} in this store (position="
                                       f"{position})", log_position=position)
        view = self._not_set_aside(self._log.read(position))
        if view.msg_id != msg_id.upper():
            raise MessageNotFoundError(f"message {msg_id} (store host {host}) is not in this "
                                       "store", log_position=position)
        return view

    def query_by_key(self, topic: str, key: str, max_count: int, begin_ms: int,
                     end_ms: int) -> list[MessageView]:
        """Messages of ``topic`` whose KEYS contain ``key`` exactly (oldest first)."""
        wanted = max(0, min(max_count, INDEX_QUERY_RESULT_MAX))
        found = self._candidates(topic, key, wanted, begin_ms, end_ms)
        matches = [view for view in found if key in view.keys]
        return matches[-wanted:] if wanted else []

    def query_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]:
        """Messages of ``topic`` whose UNIQ_KEY is ``unique_key`` (oldest first)."""
        found = self._candidates(topic, unique_key, UNIQUE_KEY_QUERY_MAX, 0, 1 << 62)
        return [view for view in found if view.unique_key == unique_key][-UNIQUE_KEY_QUERY_MAX:]

    def _candidates(self, topic: str, key: str, wanted: int, begin_ms: int,
                    end_ms: int) -> list[MessageView]:
        positions = self._key_index.query(topic, key, wanted * _COLLISION_HEADROOM, begin_ms,
                                          end_ms)
        views = []
        log_min, log_end = self._log.min_position, self._log.max_position
        topic_bytes = topic.encode()
        for position in sorted(set(positions)):
            if not log_min <= position < log_end:
                continue  # removed by retention, or cut off by recovery
            try:
                view = self._log.read_unchecked(position)
            except CorruptionError:  # an entry that does not name a record: skip, not fail
                log.warning("[query] key-index entry for %s#%s names position=%d, where no "
                            "valid record starts (verify_store reports it)", topic, key,
                            position)
                continue
            if view._topic == topic_bytes:
                views.append(view)
        return views

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms``, clamped to [min, max]."""
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            return 0
        offset = queue.offset_by_time(timestamp_ms, self._log.read_store_timestamp,
                                      self._log.min_position)
        return min(max(offset, queue.min_offset), queue.max_offset)

    def iter_messages(self, start_position: int) -> Iterator[MessageView]:
        """Every record from ``start_position`` in log order (blank records skipped)."""
        position = max(start_position, self._log.min_position)
        segment_size = self._log.config.segment_size_bytes
        while position < self._log.max_position:
            segment = self._log.segments.find(position)
            assert segment is not None  # position < the log end
            check = check_record(segment.buffer, position - segment.base_position,
                                 segment.written_position, check_crc=False)
            if check.kind == RecordKind.BLANK:
                position = segment.base_position + segment_size
            elif check.kind == RecordKind.MESSAGE:
                yield MessageView.decode(segment.buffer, position - segment.base_position)
                position += check.size
            else:
                return
