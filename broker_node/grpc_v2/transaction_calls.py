"""Transactional messages over gRPC: half sends, EndTransaction, and the check-back as
``RecoverOrphanedTransactionCommand`` on a producer's Telemetry stream.

A SendMessage of a ``TRANSACTION`` message stores a half (``Broker.send_half``) whose producer
group is ``grpc_producer_group(topic)`` (RocketMQ 5's clients name no producer group: any
producer publishing the topic answers for its halves); its result entry's ``transaction_id``
names the half (``T`` + its commit-log position and its half-queue offset, 16 hex digits each).
EndTransaction commits (``COMMIT``) or rolls back (``ROLLBACK``) that half; an unspecified
resolution changes nothing. A half that is not pending answers ``INVALID_TRANSACTION_ID``.

Checks: ``TelemetryStreams`` is the broker's check route for these halves. It hands a check to
the Telemetry stream of a live PRODUCER client whose settings publish the half's topic (else
one whose settings name no topic), as a
``RecoverOrphanedTransactionCommand`` (the message as a consumer would receive it, and the
transaction id); the client answers with EndTransaction, ``source = SOURCE_SERVER_CHECK``.
``serve_telemetry`` is the Telemetry stream itself: the client's commands (answered by the
servicer's ``answer``) and these pushes, on one stream.

Thread-safety: every method may be called from any thread (one lock over the streams).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc

from postbox.storage_engine.contract.message import Message
from postbox.storage_engine.contract.model import SendResult
from postbox.storage_engine.contract.transactions import (
    HalfReceipt,
    TransactionCheck,
    TransactionState,
)
from postbox.storage_engine.errors import TransactionStateError

from .call_context import ServiceParts, metadata
from .conversion import message_to_proto
from .names import client_id, topic_name
from .protocol import Code, definition, service
from .statuses import RequestError, status

GRPC_PRODUCER_GROUP_PREFIX = "%GRPC%"
STOP_CHECK_S = 0.25
PUSHES_QUEUED_MAX = 1024
_RESOLUTIONS = {definition.COMMIT: TransactionState.COMMIT,
                definition.ROLLBACK: TransactionState.ROLLBACK}


def grpc_producer_group(topic: str) -> str:
    """The producer group of the halves gRPC producers send to ``topic``."""
    return GRPC_PRODUCER_GROUP_PREFIX + topic


def transaction_id(result: SendResult) -> str:
    """The transaction id of a half's result (see the module docstring)."""
    return f"T{result.log_position:016X}{result.queue_offset:016X}"


def _parse_transaction_id(text: str) -> tuple[int, int]:
    if len(text) != 33 or text[0] != "T":
        raise RequestError(Code.INVALID_TRANSACTION_ID, f"{text[:64]!r} is not a transaction "
                                                        "id this broker gave")
    try:
        return int(text[1:17], 16), int(text[17:], 16)
    except ValueError:
        raise RequestError(Code.INVALID_TRANSACTION_ID, f"{text!r} is not hexadecimal") from None


def send_half(parts: ServiceParts, message: Message, group: str | None) -> tuple[SendResult, str]:
    """Store ``message`` as a half; its result and transaction id."""
    result = parts.broker.send_half(message, grpc_producer_group(message.topic),
                                    sharding_key=group)
    return result, transaction_id(result)


def end(parts: ServiceParts, request: service.EndTransactionRequest,
        context: grpc.ServicerContext) -> service.EndTransactionResponse:
    """EndTransaction (PUB on the topic: ending a transaction publishes or discards)."""
    parts.authorize(context)  # the signature before anything in the request is judged
    topic = topic_name(request.topic)
    parts.authorize(context, topics=[topic], write=True)
    parts.sessions.touch(client_id(metadata(context)), parts.clock.now_ms())
    log_position, queue_offset = _parse_transaction_id(request.transaction_id)
    state = _RESOLUTIONS.get(request.resolution)
    if state is None:
        return service.EndTransactionResponse(status=status())
    receipt = HalfReceipt(grpc_producer_group(topic), queue_offset, log_position, "",
                          request.message_id or None)
    try:
        parts.broker.end_transaction(receipt, state,
                                     from_check=request.source == definition.SOURCE_SERVER_CHECK)
    except TransactionStateError as error:
        raise RequestError(Code.INVALID_TRANSACTION_ID, str(error)) from error
    return service.EndTransactionResponse(status=status())


class TelemetryStreams:
    """The open Telemetry streams of producers, and the check route over them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[int, tuple[str | None, queue.Queue[Any]]] = {}
        self._topics: dict[int, tuple[str, ...]] = {}

    def open(self, caller: str | None) -> tuple[int, queue.Queue[Any]]:
        """A new stream's key and its queue of pushes."""
        pushes: queue.Queue[Any] = queue.Queue(PUSHES_QUEUED_MAX)
        with self._lock:
            key = id(pushes)
            self._streams[key] = (caller, pushes)
        return key, pushes

    def publishing(self, key: int, topics: tuple[str, ...]) -> None:
        """The stream's client is a producer of ``topics`` (its settings said)."""
        with self._lock:
            if key in self._streams:
                self._topics[key] = topics

    def close(self, key: int) -> None:
        """The stream ended."""
        with self._lock:
            self._streams.pop(key, None)
            self._topics.pop(key, None)

    def route_check(self, check: TransactionCheck) -> bool:
        """Push ``check`` to one producer stream of its topic; False when none (or not a gRPC
        producer's half)."""
        topic = check.message.topic
        if check.receipt.producer_group != grpc_producer_group(topic):
            return False
        with self._lock:
            candidates = [self._streams[key][1] for key, topics in self._topics.items()
                          if topic in topics] or [  # else a producer that named no topics
                self._streams[key][1] for key, topics in self._topics.items() if not topics]
        if not candidates:
            return False
        command = service.TelemetryCommand(
            recover_orphaned_transaction_command=service.RecoverOrphanedTransactionCommand(
                message=message_to_proto(check.message),
                transaction_id=f"T{check.receipt.log_position:016X}"
                               f"{check.receipt.queue_offset:016X}"))
        try:
            candidates[-1].put_nowait(command)
        except queue.Full:
            return False
        return True


def serve_telemetry(streams: TelemetryStreams, caller: str | None, requests: Iterable[Any],
                    stopping: threading.Event,
                    answer: Callable[[Any, int], Any | None]) -> Iterator[Any]:
    """The Telemetry stream: ``answer(command, key)`` for each client command (None: no
    answer), and the checks pushed to this stream, until the client ends it or the server
    stops."""
    key, pushes = streams.open(caller)
    end = object()

    def read() -> None:
        try:
            for request in requests:
                pushes.put(("request", request))
        except Exception:  # grpc.RpcError when the call is cancelled: the stream is over
            pass
        finally:
            pushes.put(end)

    threading.Thread(target=read, name="postbox-telemetry-reader", daemon=True).start()
    try:
        while not stopping.is_set():
            try:
                item = pushes.get(timeout=STOP_CHECK_S)
            except queue.Empty:
                continue
            if item is end:
                return
            if isinstance(item, tuple):
                reply = answer(item[1], key)
                if reply is not None:
                    yield reply
            else:
                yield item
    finally:
        streams.close(key)


__all__ = ["GRPC_PRODUCER_GROUP_PREFIX", "TelemetryStreams", "end", "grpc_producer_group",
           "send_half", "serve_telemetry", "transaction_id"]
