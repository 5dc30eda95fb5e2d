"""Comparing what the official Java clients saw with what Postbox reads from the same store.

The driver reports each message as the remoting client decoded it (``Messages.describe`` in
tests/lab/driver); ``differences`` lists every field where Postbox's ``MessageView`` of the same
record disagrees. The pull consumer adds two properties of its own to every message it returns
(``MIN_OFFSET``, ``MAX_OFFSET``: the queue's bounds at pull time); they are not in the record and
are left out of the comparison.
"""

from __future__ import annotations

import base64

from postbox.storage_engine import MessageStore
from postbox.storage_engine.formats.record import HostAddress

CLIENT_ADDED_PROPERTIES = frozenset({"MIN_OFFSET", "MAX_OFFSET"})


def host_text(host: HostAddress) -> str:
    """``ip:port`` as Java's ``InetAddress.getHostAddress() + ":" + port`` prints it."""
    return f"{host.ip}:{host.port}"


def postbox_fields(view) -> dict:
    """A Postbox ``MessageView`` in the driver's terms."""
    return {
        "topic": view.topic, "queue_id": view.queue_id, "queue_offset": view.queue_offset,
        "commit_log_offset": view.log_position, "store_size": view.store_size,
        "offset_msg_id": view.msg_id, "uniq_key": view.unique_key, "tags": view.tags,
        "keys": view.properties.get("KEYS"), "properties": dict(view.properties),
        "body_b64": base64.b64encode(view.body).decode(), "body_crc": view.body_crc,
        "flag": view.flag, "sys_flag": view.sys_flag,
        "born_timestamp": view.born_timestamp_ms, "store_timestamp": view.store_timestamp_ms,
        "born_host": host_text(view.born_host), "store_host": host_text(view.store_host),
        "reconsume_times": view.reconsume_count,
        "prepared_transaction_offset": view.prepared_transaction_position,
    }


def java_fields(message: dict) -> dict:
    """The driver's report of a message, without what the client added."""
    fields = dict(message)
    fields["properties"] = {name: value for name, value in message["properties"].items()
                            if name not in CLIENT_ADDED_PROPERTIES}
    return fields


def differences(java_message: dict, view, *, ignore: frozenset[str] = frozenset()) -> list[str]:
    """Every field where Java and Postbox disagree about one record (``view``: a
    ``MessageView`` or its ``postbox_fields``; ``ignore``: more properties to leave out)."""
    java = java_fields(java_message)
    java["properties"] = {k: v for k, v in java["properties"].items() if k not in ignore}
    ours = view if isinstance(view, dict) else postbox_fields(view)
    where = f"{java['topic']}/{java['queue_id']}@{java['queue_offset']}"
    return [f"{where} {name}: java={java[name]!r} postbox={ours[name]!r}"
            for name in ours if java.get(name) != ours[name]]


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list:
    """Every message of one Postbox queue, from its first offset."""
    messages, offset = [], store.min_offset(topic, queue_id)
    end = store.max_offset(topic, queue_id)
    while offset < end:
        result = store.get_message("lab-compare", topic, queue_id, offset, 64)
        if not result.messages:
            raise AssertionError(f"Postbox returned nothing for {topic}/{queue_id}@{offset} "
                                 f"(status {result.status}, max {end})")
        messages.extend(result.messages)
        offset = result.next_offset
    return messages
