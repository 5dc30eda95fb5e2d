"""The JSON dialect of RocketMQ's Java nodes (fastjson 1.x) in remoting bodies: read and write.

fastjson writes two forms that are not JSON (``reference/rocketmq-remoting.md`` §4): maps with
number keys unquoted (``{0:"10.0.0.1:10911"}``, a route's ``brokerAddrs``) and maps keyed by an
object (``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``, ``ConsumeStats``,
``TopicStatsTable``, ``ResetOffsetBody``). ``loads`` reads standard JSON plus both forms through
the project's one fastjson reader (``storage_engine.formats.fastjson``) with unquoted number keys
as their text (``"0"``, as a quoted key reads) and object keys as ``ObjectKey``. ``dumps``
writes compact JSON and writes an ``ObjectKey`` key in fastjson's object-key form, which Java
nodes read back; every other key is quoted as standard JSON (Java reads quoted number keys).

A body that is not UTF-8, not the dialect, or nested deeper than the reader's bound raises
``FastjsonError``. ``dumps`` always encodes: a lone surrogate a peer sent is written back as its
JSON escape. Pure; safe from any thread.
"""

from __future__ import annotations

import json
from typing import Any

from postbox.storage_engine.formats.fastjson import FastjsonError, ObjectKey, decode_fastjson


def loads(data: bytes | str) -> Any:
    """Parse a body written by a Java node (or any standard JSON): unquoted number keys as
    their text, object keys as ``ObjectKey``."""
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode()
        except UnicodeDecodeError as error:
            raise FastjsonError(f"not UTF-8: {error.reason}", "", 0) from None
    return decode_fastjson(data, number_keys="text")


def dumps(value: Any) -> bytes:
    """Compact JSON, with ``ObjectKey`` map keys in fastjson's object-key form."""
    if not _has_object_keys(value):
        return json_utf8(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    return json_utf8("".join(_write(value)))


def json_utf8(text: str) -> bytes:
    """JSON text as UTF-8, always. A lone surrogate (``\\ud800``: a peer may send one as a
    JSON escape, and a refusal or a stored name may echo it back) has no UTF-8 form; it is
    written as its JSON escape again (``backslashreplace`` writes exactly ``\\udXXX``)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def _has_object_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(key, ObjectKey) or _has_object_keys(item)
                   for key, item in value.items())
    if isinstance(value, list | tuple) and not isinstance(value, ObjectKey):
        return any(_has_object_keys(item) for item in value)
    return False


def _write(value: Any) -> list[str]:
    if isinstance(value, dict):
        parts = ["{"]
        for index, (key, item) in enumerate(value.items()):
            if index:
                parts.append(",")
            if isinstance(key, ObjectKey):
                parts += _write(key.as_dict())
            else:
                parts.append(json.dumps(str(key), ensure_ascii=False))
            parts.append(":")
            parts += _write(item)
        parts.append("}")
        return parts
    if isinstance(value, list | tuple):
        parts = ["["]
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            parts += _write(item)
        parts.append("]")
        return parts
    return [json.dumps(value, ensure_ascii=False)]
