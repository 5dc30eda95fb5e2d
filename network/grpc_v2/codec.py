"""Wire forms of the broker API's values: messages, stored records, receipts, configs, progress.

Stored messages travel as the commit-log records they are on disk (RocketMQ's record format,
``storage_engine.formats``), back to back in a frame's payload: the server re-encodes each
``MessageView`` with ``encode_record_parts`` (byte-identical to the stored record, property CRC
included) and the client decodes them with ``MessageView.decode``, so both sides see the same
objects with every field. The client checks each record's structure (lengths add up, magic,
no overrun); CRCs are left to TCP/HTTP-2 on that path. Records never travel from a client to
the broker: a send-back names the stored record (topic, queue, offset, log position) and the
broker reads it itself. A message to send is its fields as JSON plus the body as the payload.

Pure functions; safe to call from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, overload

from storage_engine.broker.config_beans import (
    SubscriptionGroupConfig,
    TopicConfig,
    bean_from_json,
    bean_to_json,
)
from storage_engine.broker.model import QueueProgress, SendBackOutcome, SendBackResult, SendResult
from storage_engine.errors import ConfigError, CorruptionError, InvalidTopicError
from storage_engine.formats import (
    MAGIC_V2,
    MessageView,
    RecordKind,
    check_record,
    encode_record_parts,
)
from storage_engine.store.message import GetResult, GetStatus, Message, PutStatus

from .frame import Fields

# ---- a message to send ---------------------------------------------------------------------


def message_header(message: Message, queue_id: int | None,
                   sharding_key: str | None) -> dict[str, Any]:
    """The JSON fields of a send (the body goes in the payload)."""
    return {
        "topic": message.topic, "tags": message.tags, "keys": message.keys,
        "properties": None if message.properties is None else dict(message.properties),
        "unique_key": message.unique_key, "flag": message.flag,
        "born_timestamp_ms": message.born_timestamp_ms, "born_host": message.born_host,
        "reconsume_count": message.reconsume_count, "sys_flag": message.sys_flag,
        "queue_id": queue_id, "sharding_key": sharding_key,
    }


def message_from(fields: Fields, body: bytes) -> tuple[Message, int | None, str | None]:
    """The message, explicit queue id and sharding key of a send; the store validates the rest.

    Raises:
        InvalidMessageError: a field has the wrong type.
    """
    topic = fields.values.get("topic")
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a non-empty string, got {topic!r}")
    keys = fields.values.get("keys")
    if keys is not None and not isinstance(keys, str):
        keys = fields.text_list("keys")
    message = Message(
        topic, body, tags=fields.optional_text("tags"), keys=keys,
        properties=fields.text_map("properties"), unique_key=fields.optional_text("unique_key"),
        flag=fields.integer("flag"), born_timestamp_ms=fields.optional_integer(
            "born_timestamp_ms"),
        born_host=fields.optional_text("born_host"),
        reconsume_count=fields.integer("reconsume_count"), sys_flag=fields.integer("sys_flag"))
    return message, fields.optional_integer("queue_id"), fields.optional_text("sharding_key")


# ---- stored records --------------------------------------------------------------------------


def encode_record(view: MessageView) -> bytes:
    """The record ``view`` was decoded from, byte for byte."""
    return encode_record_parts(
        view.topic.encode("utf-8"), view.magic == MAGIC_V2, view.body, view.properties_bytes,
        view.queue_id, view.flag, view.queue_offset, view.log_position, view.sys_flag,
        view.born_timestamp_ms, view.raw_born_host, view.store_timestamp_ms,
        view.raw_store_host, view.reconsume_count, view.prepared_transaction_position,
        view.body_crc)


def encode_records(views: Iterable[MessageView]) -> bytes:
    """Records back to back (a frame payload)."""
    return b"".join(map(encode_record, views))


def decode_records(payload: bytes, count: int, *, check_crc: bool = False) -> list[MessageView]:
    """``count`` records laid back to back in ``payload``, checked and decoded.

    Raises:
        CorruptionError: a record does not check out, or the payload has more or fewer bytes
            than the records.
    """
    views: list[MessageView] = []
    position = 0
    limit = len(payload)
    for index in range(count):
        check = check_record(payload, position, limit, check_crc=check_crc)
        if check.kind != RecordKind.MESSAGE:
            raise CorruptionError(f"record {index} of {count} in a {limit}-byte payload at byte "
                                  f"{position}: {check.kind} {check.reason}".rstrip())
        views.append(MessageView.decode(payload, position))
        position += check.size
    if position != limit:
        raise CorruptionError(f"{limit - position} bytes left after {count} records")
    return views


# ---- receipts and results --------------------------------------------------------------------


@overload
def receipt_to_json(receipt: SendResult) -> dict[str, Any]: ...


@overload
def receipt_to_json(receipt: None) -> None: ...


def receipt_to_json(receipt: SendResult | None) -> dict[str, Any] | None:
    """A ``SendResult`` as JSON values."""
    if receipt is None:
        return None
    return {
        "topic": receipt.topic, "queue_id": receipt.queue_id,
        "stored_topic": receipt.stored_topic, "stored_queue_id": receipt.stored_queue_id,
        "queue_offset": receipt.queue_offset, "log_position": receipt.log_position,
        "offset_msg_id": receipt.offset_msg_id, "unique_key": receipt.unique_key,
        "store_timestamp_ms": receipt.store_timestamp_ms, "delay_level": receipt.delay_level,
        "status": receipt.status.value,
    }


def receipt_from_json(values: dict[str, Any] | None) -> SendResult | None:
    """The ``SendResult`` of ``receipt_to_json``."""
    if values is None:
        return None
    return SendResult(**{**values, "status": PutStatus(values["status"])})


def send_back_to_json(result: SendBackResult) -> dict[str, Any]:
    """A ``SendBackResult`` as JSON values."""
    return {"outcome": result.outcome.value, "receipt": receipt_to_json(result.receipt),
            "reconsume_count": result.reconsume_count}


def send_back_from_json(values: dict[str, Any]) -> SendBackResult:
    """The ``SendBackResult`` of ``send_back_to_json``."""
    return SendBackResult(SendBackOutcome(values["outcome"]),
                          receipt_from_json(values["receipt"]), values["reconsume_count"])


def get_result_header(result: GetResult) -> dict[str, Any]:
    """The JSON fields of a pull result (its records go in the payload)."""
    return {"status": result.status.value, "count": len(result.messages),
            "next_offset": result.next_offset, "min_offset": result.min_offset,
            "max_offset": result.max_offset}


def get_result_from(values: dict[str, Any], payload: bytes) -> GetResult:
    """The ``GetResult`` of ``get_result_header`` plus its records."""
    return GetResult(GetStatus(values["status"]), decode_records(payload, values["count"]),
                     values["next_offset"], values["min_offset"], values["max_offset"])


def progress_to_json(items: Iterable[QueueProgress]) -> list[list]:
    """Queue progress as ``[topic, queue_id, committed, min, max]`` rows."""
    return [[p.topic, p.queue_id, p.committed_offset, p.min_offset, p.max_offset]
            for p in items]


def progress_from_json(rows: list[list]) -> list[QueueProgress]:
    """The ``QueueProgress`` list of ``progress_to_json``."""
    return [QueueProgress(*row) for row in rows]


# ---- configs ---------------------------------------------------------------------------------


def topic_config_to_json(config: TopicConfig | None) -> dict[str, Any] | None:
    """A ``TopicConfig`` as its ``topics.json`` object."""
    return None if config is None else bean_to_json(config)


def topic_config_from_json(values: dict[str, Any] | None) -> TopicConfig | None:
    """The ``TopicConfig`` of ``topic_config_to_json``."""
    if values is None:
        return None
    return _bean(TopicConfig, values, "topic_name", "topicName")


def group_config_to_json(config: SubscriptionGroupConfig) -> dict[str, Any]:
    """A ``SubscriptionGroupConfig`` as its ``subscriptionGroup.json`` object."""
    return bean_to_json(config)


def group_config_from_json(values: dict[str, Any]) -> SubscriptionGroupConfig:
    """The ``SubscriptionGroupConfig`` of ``group_config_to_json``."""
    return _bean(SubscriptionGroupConfig, values, "group_name", "groupName")


def _bean(kind: type, values: dict[str, Any], name_attribute: str, json_name: str) -> Any:
    try:
        return bean_from_json(kind, values, name_attribute, values[json_name])
    except (KeyError, ValueError) as error:
        raise ConfigError(f"the broker sent a malformed {kind.__name__}: {error}") from error


__all__ = [
    "decode_records", "encode_record", "encode_records",
    "get_result_from", "get_result_header", "group_config_from_json", "group_config_to_json",
    "message_from", "message_header", "progress_from_json", "progress_to_json",
    "receipt_from_json", "receipt_to_json", "send_back_from_json", "send_back_to_json",
    "topic_config_from_json", "topic_config_to_json",
]
