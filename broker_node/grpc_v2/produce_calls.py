"""SendMessage: store each message of the request through ``Broker.send`` (a TRANSACTION
message through ``Broker.send_half``: ``transaction_calls``).

Checks before anything is written: every topic name (``ILLEGAL_TOPIC``; the broker's internal,
retry and DLQ topics included), the caller's PUB
right on every topic, at most ``MESSAGES_PER_REQUEST_MAX`` messages, then per message the
conversion rules of ``conversion.message_from_proto`` and the store's own validation (body
size, properties). Each message gets its own result entry (message id = the client's id, the
queue offset); the top-level status is OK, the common failure, or MULTIPLE_RESULTS. A store
answer of ``FLUSH_DISK_TIMEOUT`` (SYNC flush not confirmed in time) is answered
``MASTER_PERSISTENCE_TIMEOUT``, a SYNC_MASTER's ``FLUSH_SLAVE_TIMEOUT`` /
``SLAVE_NOT_AVAILABLE`` ``SLAVE_PERSISTENCE_TIMEOUT`` / ``HA_NOT_AVAILABLE``: the message is
stored but not confirmed as promised, and the client may resend it (the consumer sees the same
message id twice).
"""

from __future__ import annotations

import grpc

from postbox.storage_engine.contract.message import PutStatus

from .call_context import ServiceParts, metadata, peer_host, report
from .conversion import message_from_proto
from .names import client_id, sendable_topic_name
from .protocol import Code, definition, service
from .statuses import RequestError, combined_status, status, status_for
from .transaction_calls import send_half

MESSAGES_PER_REQUEST_MAX = 1024


def send(parts: ServiceParts, request: service.SendMessageRequest,
         context: grpc.ServicerContext) -> service.SendMessageResponse:
    """SendMessage."""
    if not request.messages:
        raise RequestError(Code.BAD_REQUEST, "no message to send")
    if len(request.messages) > MESSAGES_PER_REQUEST_MAX:
        raise RequestError(Code.BAD_REQUEST,
                           f"at most {MESSAGES_PER_REQUEST_MAX} messages per request")
    topics = [sendable_topic_name(message.topic) for message in request.messages]
    parts.authorize(context, topics=sorted(set(topics)), write=True)
    parts.sessions.touch(client_id(metadata(context)), parts.clock.now_ms())
    peer = peer_host(context)
    delay = parts.broker.store.config.delay
    entries = []
    for topic, proto in zip(topics, request.messages, strict=True):
        try:
            message, group = message_from_proto(proto, topic, peer_host=peer,
                                                now_ms=parts.clock.now_ms(),
                                                delay=delay)
            transaction_id = ""
            if proto.system_properties.message_type == definition.TRANSACTION:
                receipt, transaction_id = send_half(parts, message, group)
            else:
                receipt = parts.broker.send(message, sharding_key=group)
        except Exception as error:  # each message is answered on its own
            report("SendMessage", error)
            entries.append(service.SendResultEntry(status=status_for(error)))
            continue
        entries.append(service.SendResultEntry(
            status=_stored_status(receipt.status),
            message_id=message.unique_key or receipt.offset_msg_id, offset=receipt.queue_offset,
            transaction_id=transaction_id))
    return service.SendMessageResponse(
        status=combined_status([entry.status for entry in entries]), entries=entries)


_STORED_NOT_CONFIRMED = {
    PutStatus.FLUSH_DISK_TIMEOUT: (Code.MASTER_PERSISTENCE_TIMEOUT,
                                   "stored, but the disk flush was not confirmed in time"),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (Code.SLAVE_PERSISTENCE_TIMEOUT,
                                    "stored, but no slave acknowledged it in time"),
    PutStatus.SLAVE_NOT_AVAILABLE: (Code.HA_NOT_AVAILABLE,
                                    "stored on the master only: no slave is in sync"),
}


def _stored_status(put_status: PutStatus) -> definition.Status:
    """OK, or the v2 code of a message stored without the confirmation SYNC modes promise."""
    if put_status is PutStatus.PUT_OK:
        return status()
    return status(*_STORED_NOT_CONFIRMED[put_status])


__all__ = ["MESSAGES_PER_REQUEST_MAX", "send"]
