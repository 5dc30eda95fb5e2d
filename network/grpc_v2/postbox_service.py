"""Postbox's own gRPC service, ``postbox.v1.Broker``: the framework's remote transport.

The network broker speaks RocketMQ 5's ``MessagingService`` for the official clients and, next
to it, this service for Postbox's framework, whose exact semantics need what that API lacks:
client-side rebalancing membership, orderly queue locks, send-back of a pulled message, DLQ
listing and multi-queue long-poll waits (``docs/remote-transport.md``). There is one unary
method per ``BrokerClient`` operation (``METHODS``), plus ``Hello`` (protocol version, limits)
and ``WatchMembership`` (long-poll on membership versions), each served by the embedded
``Broker`` it wraps, so validation, errors and effects are the embedded ones.

Encoding: every request and response is a ``frame`` (JSON header + raw payload) — no .proto
files or generated code; stored messages travel as their commit-log records (``codec``).
Errors: a ``StorageError`` aborts the call with its status code and class (``error_status``);
anything else is logged and becomes INTERNAL. Access: with an ``AccessControl``, every method
checks the caller's rights on every topic and group it reads or writes before it changes
anything (the table in docs/remoting.md): PUB to send (plus the create right when the topic does
not exist yet), SUB on topics and groups to read, consume and commit, any right on a topic to
read its config. ``SendBack`` names a record the broker holds — the queue, offset and log
position the caller read it at — never bytes from the caller: the broker reads the record
itself, and the caller needs SUB on the group, on the topic it was read from and on its original
topic. ``ResendDeadLetter`` needs SUB on the group and PUB on the topic the dead letter goes
back to.

Long waits (pull with suspend, arrival waits, membership watches) are capped at
``broker.long_polling_max_ms``, end early when the client cancels, and take one of
``long_waits_max`` slots (``WaitSlots``): the server's thread pool must have more workers than
that.

Thread-safety: handlers run on the server's worker threads concurrently; the broker, the board
and the slots are thread-safe. Nothing is kept here beyond membership versions (in memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import grpc

from storage_engine.broker.broker import Broker
from storage_engine.broker.config_beans import validate_group
from storage_engine.broker.model import ConsumeFrom
from storage_engine.errors import InvalidMessageError, MessageNotFoundError, StorageError
from storage_engine.formats import PROPERTY_RETRY_TOPIC, MessageView
from storage_engine.store.topics import validate_topic

from ..acl_file import SUB
from .codec import (
    encode_records,
    get_result_header,
    group_config_to_json,
    message_from,
    progress_to_json,
    receipt_to_json,
    send_back_to_json,
    topic_config_to_json,
)
from .error_status import abort_with_error, error_detail
from .frame import Fields, pack, unpack
from .membership_board import MembershipBoard
from .wait_slots import WaitSlots

if TYPE_CHECKING:
    from ..acl_file import Account
    from .auth import AccessControl

log = logging.getLogger(__name__)

SERVICE_NAME = "postbox.v1.Broker"
PROTOCOL_VERSION = 2
"""2: ``SendBack`` names the stored record (topic, queue id, queue offset, log position)."""
LONG_WAITS_MAX = 32
"""Default cap on concurrently blocking calls; give the server at least this + 16 workers."""

METHODS = (
    "Hello", "Send", "SendBatch", "Pull", "WaitForArrival", "CommitOffset", "QueryOffset",
    "StartOffset", "SendBack", "CreateTopic", "TopicConfig", "QueueIds", "SubscriptionGroup",
    "RegisterConsumer", "UnregisterConsumer", "ConsumerIds", "WatchMembership", "LockQueues",
    "UnlockQueues", "ConsumerProgress", "ConsumerGroups", "DeadLetters", "FindByUniqueKey",
    "ResendDeadLetter",
)
"""Method names: ``/postbox.v1.Broker/<name>``, each unary, bytes in and out (``frame``)."""

Handler = Callable[[Fields, bytes, grpc.ServicerContext], bytes]


def add_postbox_service(server: grpc.Server, broker: Broker, *,
                        access: AccessControl | None = None) -> None:
    """Register ``postbox.v1.Broker`` on ``server``, serving ``broker``."""
    PostboxService(broker, access=access).register(server)


class PostboxService:
    """The handlers of ``postbox.v1.Broker`` over one broker."""

    def __init__(self, broker: Broker, *, access: AccessControl | None = None,
                 long_waits_max: int = LONG_WAITS_MAX) -> None:
        self._broker = broker
        self._access = access
        self._board = MembershipBoard()
        self._slots = WaitSlots(long_waits_max)
        self._wait_max_ms = broker.store.config.broker.long_polling_max_ms
        broker.add_membership_listener(self._board.on_change)

    def register(self, server: grpc.Server) -> None:
        """Add the service's method handlers to ``server`` (before it starts)."""
        table = self._handlers()
        assert tuple(table) == METHODS, "every method has exactly one handler"
        handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
            name: grpc.unary_unary_rpc_method_handler(self._wrap(name, handler))
            for name, handler in table.items()}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))

    def _handlers(self) -> dict[str, Handler]:
        return {
            "Hello": self._hello, "Send": self._send, "SendBatch": self._send_batch,
            "Pull": self._pull,
            "WaitForArrival": self._wait_for_arrival, "CommitOffset": self._commit_offset,
            "QueryOffset": self._query_offset, "StartOffset": self._start_offset,
            "SendBack": self._send_back, "CreateTopic": self._create_topic,
            "TopicConfig": self._topic_config, "QueueIds": self._queue_ids,
            "SubscriptionGroup": self._subscription_group,
            "RegisterConsumer": self._register_consumer,
            "UnregisterConsumer": self._unregister_consumer, "ConsumerIds": self._consumer_ids,
            "WatchMembership": self._watch_membership, "LockQueues": self._lock_queues,
            "UnlockQueues": self._unlock_queues, "ConsumerProgress": self._consumer_progress,
            "ConsumerGroups": self._consumer_groups, "DeadLetters": self._dead_letters,
            "FindByUniqueKey": self._find_by_unique_key,
            "ResendDeadLetter": self._resend_dead_letter,
        }

    def _wrap(self, name: str, handler: Handler) -> Callable[[bytes, grpc.ServicerContext],
                                                               bytes]:
        def call(request: bytes, context: grpc.ServicerContext) -> bytes:
            try:
                fields, payload = unpack(request)
                return handler(fields, payload, context)
            except StorageError as error:
                abort_with_error(context, error)
                raise  # not reached: abort raises
            except Exception:
                # access control already ended the call (grpcio has ServicerContext.code()
                # since 1.38; the stubs lack it)
                if context.code() is not None:  # type: ignore[attr-defined]
                    raise
                log.exception("[postbox-service] %s failed", name)
                context.abort(grpc.StatusCode.INTERNAL,
                              f"{name}: internal error (details in the broker's log)")
                raise

        return call

    def _authorize(self, context: grpc.ServicerContext, *, topics: Iterable[str] = (),
                   groups: Iterable[str] = (), write: bool = False, create: Iterable[str] = (),
                   describe: Iterable[str] = ()) -> Account | None:
        """The caller's account after ``AccessControl.authorize`` (None without an ACL); a
        ``write`` to a topic that does not exist (and would be auto-created) also needs the
        create right."""
        if self._access is None:
            return None
        topics = tuple(topics)
        if write and self._broker.store.config.broker.auto_create_topic:
            create = (*create, *(t for t in topics if self._broker.topic_config(t) is None))
        return self._access.authorize(context, topics=topics, groups=tuple(groups),
                                      write=write, create=tuple(create),
                                      describe=tuple(describe))

    def _wait_ms(self, fields: Fields, name: str) -> int:
        return max(0, min(fields.integer(name), self._wait_max_ms))

    # ---- sending -------------------------------------------------------------------------------

    def _hello(self, fields: Fields, payload: bytes, context: grpc.ServicerContext) -> bytes:
        self._authorize(context)
        return pack({"protocol": PROTOCOL_VERSION, "epoch": self._board.epoch,
                     "long_polling_max_ms": self._wait_max_ms})

    def _send(self, fields: Fields, payload: bytes, context: grpc.ServicerContext) -> bytes:
        message, queue_id, sharding_key = message_from(fields, payload)
        self._authorize(context, topics=(message.topic,), write=True)
        receipt = self._broker.send(message, queue_id=queue_id, sharding_key=sharding_key)
        return pack(receipt_to_json(receipt))

    def _send_batch(self, fields: Fields, payload: bytes,
                    context: grpc.ServicerContext) -> bytes:
        """Messages of one topic (``SendCoalescer``): each stored in order, each with its own
        receipt or error, as if sent one by one."""
        headers, sizes = fields.values.get("messages"), fields.values.get("sizes")
        if (not isinstance(headers, list) or not isinstance(sizes, list)
                or len(headers) != len(sizes) or not headers
                or not all(isinstance(h, dict) for h in headers)
                or not all(type(n) is int and n >= 0 for n in sizes)
                or sum(sizes) != len(payload)):
            raise InvalidMessageError("a send batch needs 'messages' and 'sizes' lists of "
                                      "equal length whose sizes add up to the payload")
        topics = {header.get("topic") for header in headers}
        if len(topics) != 1:
            raise InvalidMessageError("the messages of a send batch share one topic")
        topic = topics.pop()
        if isinstance(topic, str):
            self._authorize(context, topics=(topic,), write=True)
        results: list[dict] = []
        start = 0
        for header, size in zip(headers, sizes, strict=True):
            body, start = payload[start:start + size], start + size
            try:
                message, queue_id, sharding_key = message_from(Fields(header), body)
                receipt = self._broker.send(message, queue_id=queue_id,
                                            sharding_key=sharding_key)
                results.append({"receipt": receipt_to_json(receipt)})
            except StorageError as error:
                results.append({"error": error_detail(error)})
        return pack({"results": results})

    def _send_back(self, fields: Fields, payload: bytes, context: grpc.ServicerContext) -> bytes:
        """Send back the record the caller read at (topic, queue id, queue offset): the broker
        reads it; a log position that does not match means the caller's copy is not that
        record (refused, nothing written)."""
        group, topic = fields.text("group"), fields.text("topic")
        self._authorize(context, topics=(topic,), groups=(group,))
        view = self._stored_record(group, topic, fields.integer("queue_id"),
                                   fields.integer("queue_offset"), fields.integer("log_position"))
        origin = view.properties.get(PROPERTY_RETRY_TOPIC)
        if origin:
            self._authorize(context, topics=(origin,))
        result = self._broker.send_back(
            group, view, delay_level=fields.integer("delay_level"),
            max_reconsume_times=fields.optional_integer("max_reconsume_times"),
            reason=fields.optional_text("reason"))
        return pack(send_back_to_json(result))

    def _stored_record(self, group: str, topic: str, queue_id: int, queue_offset: int,
                       log_position: int) -> MessageView:
        found = self._broker.pull(group, topic, queue_id, queue_offset, 1).messages
        if not found or found[0].queue_offset != queue_offset \
                or found[0].log_position != log_position:
            raise MessageNotFoundError(f"no record at offset {queue_offset} of {topic} queue "
                                       f"{queue_id} with log position {log_position}: send-back "
                                       "takes a message as it was read from this broker",
                                       log_position=log_position)
        return found[0]

    def _resend_dead_letter(self, fields: Fields, payload: bytes,
                            context: grpc.ServicerContext) -> bytes:
        group, queue_offset = fields.text("group"), fields.integer("queue_offset")
        self._authorize(context, groups=(group,))
        if self._access is not None:
            letters = self._broker.dead_letters(group, queue_offset, 1)
            if letters and letters[0].queue_offset == queue_offset:  # else the broker refuses
                target = letters[0].properties.get(PROPERTY_RETRY_TOPIC) or letters[0].topic
                self._authorize(context, topics=(target,), write=True)
        receipt = self._broker.resend_dead_letter(group, queue_offset)
        return pack(receipt_to_json(receipt))

    # ---- pulling and waiting -------------------------------------------------------------------

    def _pull(self, fields: Fields, payload: bytes, context: grpc.ServicerContext) -> bytes:
        group, topic = fields.text("group"), fields.text("topic")
        self._authorize(context, topics=(topic,), groups=(group,))
        suspend_ms = self._wait_ms(fields, "suspend_timeout_ms")
        with self._slots.slot() as granted:
            result = self._broker.pull(
                group, topic, fields.integer("queue_id"), fields.integer("offset"),
                fields.integer("max_count"), tags=fields.optional_text("tags"),
                suspend_timeout_ms=suspend_ms if granted else 0)
        header = get_result_header(result)
        header["busy"] = suspend_ms > 0 and not granted
        return pack(header, encode_records(result.messages))

    def _wait_for_arrival(self, fields: Fields, payload: bytes,
                          context: grpc.ServicerContext) -> bytes:
        positions = fields.queue_positions("positions")
        topics = {validate_topic(topic) for topic, _ in positions}
        self._authorize(context, topics=sorted(topics))
        timeout_ms = self._wait_ms(fields, "timeout_ms")
        with self._slots.slot() as granted:
            arrived = granted and self._broker.wait_for_arrival(
                positions, timeout_ms, cancel=lambda: not context.is_active())
        return pack({"arrived": arrived, "busy": not granted})

    # ---- offsets -------------------------------------------------------------------------------

    def _queue_call(self, fields: Fields, context: grpc.ServicerContext) -> tuple[str, str, int]:
        group, topic = fields.text("group"), fields.text("topic")
        self._authorize(context, topics=(topic,), groups=(group,))
        return group, topic, fields.integer("queue_id")

    def _commit_offset(self, fields: Fields, payload: bytes,
                       context: grpc.ServicerContext) -> bytes:
        group, topic, queue_id = self._queue_call(fields, context)
        self._broker.commit_offset(group, topic, queue_id, fields.integer("offset"))
        return pack({})

    def _query_offset(self, fields: Fields, payload: bytes,
                      context: grpc.ServicerContext) -> bytes:
        group, topic, queue_id = self._queue_call(fields, context)
        return pack({"offset": self._broker.query_offset(group, topic, queue_id)})

    def _start_offset(self, fields: Fields, payload: bytes,
                      context: grpc.ServicerContext) -> bytes:
        group, topic, queue_id = self._queue_call(fields, context)
        mode = fields.text("consume_from")
        try:
            consume_from = ConsumeFrom(mode)
        except ValueError as error:
            raise InvalidMessageError(f"consume_from must be one of "
                                      f"{[m.value for m in ConsumeFrom]}, got {mode!r}",
                                      topic=topic) from error
        offset = self._broker.start_offset(group, topic, queue_id, consume_from,
                                           fields.optional_integer("timestamp_ms"))
        return pack({"offset": offset})

    # ---- topics and groups ---------------------------------------------------------------------

    def _create_topic(self, fields: Fields, payload: bytes,
                      context: grpc.ServicerContext) -> bytes:
        topic = fields.text("topic")
        self._authorize(context, create=(topic,))
        config = self._broker.create_topic(topic, fields.optional_integer("queue_count"),
                                           perm=fields.integer("perm"),
                                           order=fields.flag("order"))
        return pack({"config": topic_config_to_json(config)})

    def _topic_config(self, fields: Fields, payload: bytes,
                      context: grpc.ServicerContext) -> bytes:
        topic = fields.text("topic")
        self._authorize(context, describe=(topic,))
        return pack({"config": topic_config_to_json(self._broker.topic_config(topic))})

    def _queue_ids(self, fields: Fields, payload: bytes, context: grpc.ServicerContext) -> bytes:
        topic = fields.text("topic")
        self._authorize(context, describe=(topic,))
        return pack({"queue_ids": self._broker.queue_ids(topic)})

    def _subscription_group(self, fields: Fields, payload: bytes,
                            context: grpc.ServicerContext) -> bytes:
        group = fields.text("group")
        self._authorize(context, groups=(group,))
        return pack({"config": group_config_to_json(self._broker.subscription_group(group))})

    def _consumer_progress(self, fields: Fields, payload: bytes,
                           context: grpc.ServicerContext) -> bytes:
        group = fields.text("group")
        self._authorize(context, groups=(group,))
        return pack({"progress": progress_to_json(self._broker.consumer_progress(group))})

    def _consumer_groups(self, fields: Fields, payload: bytes,
                         context: grpc.ServicerContext) -> bytes:
        """Every known group the caller has SUB on."""
        account = self._authorize(context)
        groups = self._broker.consumer_groups()
        if account is not None:
            groups = [group for group in groups if account.may("group", group, SUB)]
        return pack({"groups": groups})

    # ---- membership and locks ------------------------------------------------------------------

    def _register_consumer(self, fields: Fields, payload: bytes,
                           context: grpc.ServicerContext) -> bytes:
        group, topics = fields.text("group"), fields.text_list("topics")
        self._authorize(context, topics=topics, groups=(group,))
        changed = self._broker.register_consumer(group, fields.text("client_id"), topics)
        return pack({"changed": changed, "version": self._board.version(group),
                     "epoch": self._board.epoch})

    def _unregister_consumer(self, fields: Fields, payload: bytes,
                             context: grpc.ServicerContext) -> bytes:
        group = fields.text("group")
        self._authorize(context, groups=(group,))
        self._broker.unregister_consumer(group, fields.text("client_id"))
        return pack({"version": self._board.version(group), "epoch": self._board.epoch})

    def _consumer_ids(self, fields: Fields, payload: bytes,
                      context: grpc.ServicerContext) -> bytes:
        group = fields.text("group")
        self._authorize(context, groups=(group,))
        return pack({"ids": self._broker.consumer_ids(group)})

    def _watch_membership(self, fields: Fields, payload: bytes,
                          context: grpc.ServicerContext) -> bytes:
        known = fields.values.get("versions")
        if not isinstance(known, dict) or not all(type(v) is int for v in known.values()):
            raise InvalidMessageError("field 'versions' must map groups to integers")
        for group in known:
            validate_group(group)
        self._authorize(context, groups=sorted(known))
        granted = True
        if fields.optional_text("epoch") == self._board.epoch:  # else: report the new epoch now
            with self._slots.slot() as granted:
                if granted:
                    known = self._board.wait(known, self._wait_ms(fields, "timeout_ms"),
                                             cancel=lambda: not context.is_active())
        else:
            known = {group: self._board.version(group) for group in known}
        return pack({"versions": known, "epoch": self._board.epoch, "busy": not granted})

    def _lock_queues(self, fields: Fields, payload: bytes, context: grpc.ServicerContext) -> bytes:
        group, queues = fields.text("group"), fields.queue_list("queues")
        self._authorize(context, topics=sorted({t for t, _ in queues}), groups=(group,))
        granted = self._broker.lock_queues(group, fields.text("client_id"), queues)
        return pack({"queues": sorted(granted)})

    def _unlock_queues(self, fields: Fields, payload: bytes,
                       context: grpc.ServicerContext) -> bytes:
        group, queues = fields.text("group"), fields.queue_list("queues")
        self._authorize(context, topics=sorted({t for t, _ in queues}), groups=(group,))
        self._broker.unlock_queues(group, fields.text("client_id"), queues)
        return pack({})

    # ---- reading back --------------------------------------------------------------------------

    def _dead_letters(self, fields: Fields, payload: bytes,
                      context: grpc.ServicerContext) -> bytes:
        group = fields.text("group")
        self._authorize(context, groups=(group,))
        views = self._broker.dead_letters(group, fields.integer("offset"),
                                          fields.integer("max_count"))
        return pack({"count": len(views)}, encode_records(views))

    def _find_by_unique_key(self, fields: Fields, payload: bytes,
                            context: grpc.ServicerContext) -> bytes:
        topic = fields.text("topic")
        self._authorize(context, topics=(topic,))
        views = self._broker.find_by_unique_key(topic, fields.text("unique_key"))
        return pack({"count": len(views)}, encode_records(views))


__all__ = ["LONG_WAITS_MAX", "METHODS", "PROTOCOL_VERSION", "SERVICE_NAME", "PostboxService",
           "add_postbox_service"]
