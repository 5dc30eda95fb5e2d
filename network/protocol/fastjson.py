"""The JSON dialect of RocketMQ's Java nodes (fastjson 1.x), read tolerantly and written exactly.

fastjson writes two forms that are not JSON (``reference/rocketmq-remoting.md`` §4): maps with
number keys unquoted (``{0:"10.0.0.1:10911"}``, a route's ``brokerAddrs``) and maps keyed by an
object (``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``, ``ConsumeStats``,
``TopicStatsTable``, ``ResetOffsetBody``). ``loads`` reads standard JSON plus both forms: an
unquoted number key becomes its text (``"0"``), an object key becomes an ``ObjectKey`` (a
hashable, sorted tuple of its items). ``dumps`` writes compact JSON and writes an ``ObjectKey``
(or any key that is a ``dict``-like ``ObjectKey``) in fastjson's object-key form, which Java
nodes read back; every other key is quoted as standard JSON (Java reads quoted number keys).

Standard documents go through the C ``json`` module; only a document that fails it is parsed by
the small recursive-descent parser here. Both are bounded in depth (``MAX_DEPTH``): a deeper
body, or one that is not UTF-8, raises ``FastjsonError``. ``dumps`` always encodes: a lone
surrogate a peer sent is written back as its JSON escape. Pure; safe from any thread.
"""

from __future__ import annotations

import json
from typing import Any


class FastjsonError(ValueError):
    """A body that is neither JSON nor fastjson's dialect of it."""


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A map key that is an object (a ``MessageQueue``), hashable: its items sorted by name."""

    __slots__ = ()

    @classmethod
    def of(cls, **items: Any) -> ObjectKey:
        """The key with these members."""
        return cls(sorted(items.items()))

    def as_dict(self) -> dict[str, Any]:
        """The key's members."""
        return dict(self)


MAX_DEPTH = 64


def loads(data: bytes | str) -> Any:
    """Parse a body written by a Java node (or any standard JSON)."""
    try:
        text = data.decode() if isinstance(data, bytes | bytearray) else data
        value = json.loads(text)
        if text.count("[") + text.count("{") > MAX_DEPTH:  # else it cannot be too deep
            _check_depth(value)
        return value
    except UnicodeDecodeError as error:
        raise FastjsonError(f"not UTF-8: {error}") from None
    except ValueError:
        pass
    except RecursionError:  # the C parser has no depth bound of its own
        raise FastjsonError(f"nested deeper than {MAX_DEPTH}") from None
    parser = _Parser(text)
    value = parser.value(0)
    parser.skip_space()
    if parser.at != len(text):
        raise parser.error("trailing characters")
    return value


def _check_depth(value: Any) -> None:
    """``FastjsonError`` when ``value`` nests deeper than ``MAX_DEPTH`` (as the dialect's
    parser bounds it: a deep document would fail later, in whatever walks it)."""
    level: list[Any] = [value]
    for depth in range(MAX_DEPTH + 2):
        below: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                below.extend(item.values())
            elif isinstance(item, list):
                below.extend(item)
        if not below:
            return
        if depth > MAX_DEPTH:
            break
        level = below
    raise FastjsonError(f"nested deeper than {MAX_DEPTH}")


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


_DECODER = json.JSONDecoder()
_NUMBER_CHARS = frozenset("+-0123456789.eE")


class _Parser:
    """Recursive descent over fastjson's dialect; scalars are read by the ``json`` module."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def error(self, problem: str) -> FastjsonError:
        return FastjsonError(f"not JSON at character {self.at}: {problem}")

    def skip_space(self) -> None:
        text, at = self.text, self.at
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        self.at = at

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH}")
        self.skip_space()
        if self.at >= len(self.text):
            raise self.error("unexpected end")
        char = self.text[self.at]
        if char == "{":
            return self.object(depth)
        if char == "[":
            return self.array(depth)
        try:
            value, end = _DECODER.raw_decode(self.text, self.at)
        except ValueError:
            raise self.error(f"unexpected {char!r}") from None
        self.at = end
        return value

    def key(self, depth: int) -> Any:
        self.skip_space()
        char = self.text[self.at:self.at + 1]
        if char == "{":
            members = self.object(depth)
            return ObjectKey(sorted(members.items()))
        if char == '"':
            return self.value(depth)
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in _NUMBER_CHARS:
            self.at += 1
        if start == self.at:
            raise self.error(f"unexpected {char!r} where a key belongs")
        return self.text[start:self.at]

    def object(self, depth: int) -> dict[Any, Any]:
        self.at += 1
        result: dict[Any, Any] = {}
        self.skip_space()
        if self.text[self.at:self.at + 1] == "}":
            self.at += 1
            return result
        while True:
            key = self.key(depth + 1)
            self.expect(":")
            result[key] = self.value(depth + 1)
            if self.separator("}"):
                return result

    def array(self, depth: int) -> list[Any]:
        self.at += 1
        result: list[Any] = []
        self.skip_space()
        if self.text[self.at:self.at + 1] == "]":
            self.at += 1
            return result
        while True:
            result.append(self.value(depth + 1))
            if self.separator("]"):
                return result

    def expect(self, char: str) -> None:
        self.skip_space()
        if self.text[self.at:self.at + 1] != char:
            raise self.error(f"expected {char!r}")
        self.at += 1

    def separator(self, closing: str) -> bool:
        """Consume ``,`` (False) or the closing bracket (True)."""
        self.skip_space()
        char = self.text[self.at:self.at + 1]
        self.at += 1
        if char == closing:
            return True
        if char != ",":
            raise self.error(f"expected ',' or {closing!r}")
        return False
