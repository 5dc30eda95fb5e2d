"""The JSON dialect of RocketMQ's Java nodes (fastjson 1.x): the one reader, and the config writer.

A Java broker writes ``config/*.json`` with fastjson ``toJSONString(obj, PrettyFormat)``
(reference §9.1, VECTORS.md §9), and its remoting bodies compactly (``reference/
rocketmq-remoting.md`` §4). Neither is strict JSON: integer map keys are unquoted
(``{0:"10.0.0.1:10911"}``) and a remoting body may key a map by an object
(``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``). The writer below reproduces the config
files' bytes (the remoting writer, compact, is ``network``'s); the one reader accepts the dialect
and strict JSON, for both.

Writer rules (each one observed in the vector files or read from fastjson 1.2.x's serializers)::

    {                                   <- "{"; entries follow
    \\t"offsetTable":{                   <- a *string* key starts a new line, one TAB deeper
    \\t\\t"TopicTest@g":{0:250,1:250      <- an *integer* key does not: int maps stay inline
    \\t\\t},                              <- a non-empty object closes on its own line
    \\t\\t"empty":{}                      <- an empty object is "{}"
    \\t}
    }                                   <- no trailing newline

* ``"key":value`` with no space; dict entries are written in the order given (callers sort the
  fields of Java beans, fastjson's default; map entries keep their map order).
* Strings: ``\\b \\t \\n \\f \\r \\" \\\\`` escaped by letter; U+0000–U+0007, U+000B,
  U+000E–U+001F, U+007F–U+009F and U+2028 as ``\\uXXXX`` (upper-case hex); ``/`` and all other
  characters, non-ASCII included, are written as they are.
* Arrays are written inline, ``[1,2,3]`` (fastjson's ``int[]`` and ``Set`` codecs; the only arrays
  in RocketMQ config files are a bloom filter's ``bitPos`` and 5.x ``subscriptionDataSet``). An
  object inside an array is pretty-printed one level deeper than the line holding the array.
* ``true``/``false``/``null``; integers in decimal; floats (never written by RocketMQ) as Python's
  ``repr``, so they read back exactly.

Reader: ``decode_fastjson(text, number_keys=...)``. A standard document goes through the C
``json`` module; only one that fails it is read by the small recursive-descent parser here
(strings through ``json.decoder.scanstring``, so text inside a string literal, ``"{1:2}"``, is
never mistaken for a key). ``NaN`` and ``Infinity`` are refused by both. An object key is a JSON
string, an unquoted number or an object (an ``ObjectKey``: hashable, its items sorted). The
caller states what an unquoted number key becomes, the one detail the two uses need differently:

* ``number_keys="int"`` (``decode_config_json``, config files): an ``int`` (``-?[0-9]+`` only),
  while quoted keys stay ``str``, so ``decode(encode(x)) == x`` for str- and int-keyed dicts;
* ``number_keys="text"`` (remoting bodies): its text, ``"0"``, so a map reads the same whether
  the peer quoted its keys (``acceptStandardJsonOnly``) or not.

Errors are ``FastjsonError``, a ``json.JSONDecodeError`` (a ``ValueError``) with line and column.

Limits: nesting depth at most ``NESTING_DEPTH_MAX`` in both directions (config files nest 5 deep).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the C scanner json.decoder exports; typeshed does not declare it
    def scanstring(string: str, end: int, strict: bool = True) -> tuple[str, int]:
        """The JSON string starting after the quote at ``end - 1``, and where it ends."""
else:
    from json.decoder import scanstring

NESTING_DEPTH_MAX = 64
"""Deepest nesting of objects/arrays accepted by the writer and the reader."""

_TAB = "\t"

# Characters fastjson escapes inside double-quoted strings (SerializeWriter / IOUtils tables).
_ESCAPE_BY_LETTER = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
                     '"': '\\"', "\\": "\\\\"}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\x7f-\x9f\u2028]')

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NUMBER_KEY = re.compile(r"[-+0-9.eE]+")
_INT_KEY = re.compile(r"-?[0-9]+")
_LITERALS = {"true": True, "false": False, "null": None}


# --------------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------------

class EncodedJson:
    """A value already encoded by ``encode_json_value`` for one indentation and depth; written
    as is when met there, so a table of many beans encodes each bean once, not on every write."""

    __slots__ = ("text", "indent", "nesting")

    def __init__(self, text: str, indent: int, nesting: int) -> None:
        self.text = text
        self.indent = indent
        self.nesting = nesting


def encode_json_value(value: Any, indent: int, nesting: int) -> EncodedJson:
    """``value`` encoded as it is written at ``indent`` TABs and depth ``nesting``."""
    parts: list[str] = []
    _write_value(value, indent, nesting, parts)
    return EncodedJson("".join(parts), indent, nesting)


def encode_config_json(value: Any) -> str:
    """Serialize ``value`` exactly as fastjson's pretty format would (no trailing newline).

    Accepts dicts (``str`` or ``int`` keys), lists/tuples, ``str``, ``int``, ``bool``, ``None``,
    finite floats and ``EncodedJson`` fragments (at the place they were encoded for).

    Raises:
        TypeError: a value or key of another type.
        ValueError: a non-finite float, or nesting deeper than ``NESTING_DEPTH_MAX``.
    """
    parts: list[str] = []
    _write_value(value, 0, 0, parts)
    return "".join(parts)


def _write_value(value: Any, indent: int, nesting: int, parts: list[str]) -> None:
    """Append ``value``; ``indent`` = TABs of the line it starts on, ``nesting`` = its depth."""
    if value.__class__ is EncodedJson:  # first: a table of many beans is mostly these
        if (value.indent, value.nesting) != (indent, nesting):
            raise ValueError(f"a value encoded at indent {value.indent}, depth {value.nesting} "
                             f"is written at indent {indent}, depth {nesting}")
        parts.append(value.text)
    elif value is None:
        parts.append("null")
    elif value is True or value is False:
        parts.append("true" if value else "false")
    elif isinstance(value, int):
        parts.append(str(int(value)))
    elif isinstance(value, str):
        parts.append(_quote(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write the non-finite float {value!r} to a config file")
        parts.append(repr(value))
    elif isinstance(value, Mapping):
        _write_object(value, indent, nesting, parts)
    elif isinstance(value, list | tuple):
        _write_array(value, indent, nesting, parts)
    else:
        raise TypeError(f"cannot write {type(value).__name__} to a config file")


def _write_object(mapping: Mapping[Any, Any], indent: int, nesting: int, parts: list[str]) -> None:
    _check_nesting(nesting)
    if not mapping:
        parts.append("{}")
        return
    entry_indent = "\n" + _TAB * (indent + 1)
    parts.append("{")
    first = True
    for key, item in mapping.items():
        if not first:
            parts.append(",")
        first = False
        if isinstance(key, str):
            parts.append(entry_indent)  # fastjson's println() before a string key
            parts.append(_quote(key))
        elif isinstance(key, int) and not isinstance(key, bool):
            parts.append(str(int(key)))  # non-string keys get no line break
        else:
            raise TypeError(f"config-file map keys must be str or int, got {key!r}")
        parts.append(":")
        _write_value(item, indent + 1, nesting + 1, parts)
    parts.append("\n" + _TAB * indent + "}")


def _write_array(items: list[Any] | tuple[Any, ...], indent: int, nesting: int,
                 parts: list[str]) -> None:
    _check_nesting(nesting)
    parts.append("[")
    for index, item in enumerate(items):
        if index:
            parts.append(",")
        _write_value(item, indent, nesting + 1, parts)  # inline: same line, same indentation
    parts.append("]")


def _quote(text: str) -> str:
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPE_BY_LETTER.get(char) or f"\\u{ord(char):04X}"


def _check_nesting(nesting: int) -> None:
    if nesting >= NESTING_DEPTH_MAX:
        raise ValueError(f"config document nests deeper than {NESTING_DEPTH_MAX} levels")


# --------------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------------

NumberKeys = Literal["int", "text"]
"""What an unquoted number map key becomes: an ``int``, or its text (see the module docstring)."""


class FastjsonError(json.JSONDecodeError):
    """A text that is neither JSON nor fastjson's dialect of it (position attached)."""


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


def decode_config_json(text: str) -> Any:
    """A config file: ``decode_fastjson`` with unquoted integer keys read as ``int``."""
    return decode_fastjson(text, number_keys="int")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_STANDARD = json.JSONDecoder(parse_constant=_refuse_constant)


def decode_fastjson(text: str, *, number_keys: NumberKeys) -> Any:
    """Parse fastjson's dialect or strict JSON (see the module docstring for ``number_keys``).

    Raises:
        FastjsonError: the text is not a single well-formed value (position attached), or it
            nests deeper than ``NESTING_DEPTH_MAX``.
    """
    if number_keys not in ("int", "text"):
        raise ValueError(f"number_keys must be 'int' or 'text', got {number_keys!r}")
    try:
        value = _STANDARD.decode(text)
    except RecursionError:  # the C parser has no depth bound of its own
        raise FastjsonError(f"nesting deeper than {NESTING_DEPTH_MAX} levels", text, 0) from None
    except ValueError:
        pass
    else:
        if text.count("[") + text.count("{") > NESTING_DEPTH_MAX:  # else it cannot be too deep
            _check_depth(value, text)
        return value
    reader = _Reader(text, number_keys == "int")
    position = reader.skip_space(0)
    value, position = reader.value(position, 0)
    position = reader.skip_space(position)
    if position != len(text):
        raise FastjsonError("Extra data", text, position)
    return value


def _check_depth(value: Any, text: str) -> None:
    """``FastjsonError`` when ``value`` nests deeper than the dialect's parser allows."""
    level: list[Any] = [value]
    for _depth in range(NESTING_DEPTH_MAX):
        below: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                below.extend(item.values())
            elif isinstance(item, list):
                below.extend(item)
        if not below:
            return
        level = below
    if any(isinstance(item, dict | list) for item in level):
        raise FastjsonError(f"nesting deeper than {NESTING_DEPTH_MAX} levels", text, 0)


class _Reader:
    """Recursive-descent parser over one text; positions are passed and returned explicitly."""

    def __init__(self, text: str, int_keys: bool) -> None:
        self.text = text
        self.int_keys = int_keys

    def skip_space(self, position: int) -> int:
        space = _WHITESPACE.match(self.text, position)
        assert space is not None  # the pattern matches the empty string
        return space.end()

    def fail(self, message: str, position: int) -> FastjsonError:
        return FastjsonError(message, self.text, position)

    def string(self, position: int) -> tuple[str, int]:
        """The string literal whose quote is at ``position``, and where it ends."""
        try:
            return scanstring(self.text, position + 1, True)
        except json.JSONDecodeError as error:
            raise self.fail(error.msg, error.pos) from None

    def value(self, position: int, depth: int) -> tuple[Any, int]:
        text = self.text
        char = text[position:position + 1]
        if char == '"':
            return self.string(position)
        if char == "{":
            return self.object(position, depth)
        if char == "[":
            return self.array(position, depth)
        number = _NUMBER.match(text, position)
        if number is not None:
            if number.group(1) or number.group(2):
                return float(number.group()), number.end()
            return int(number.group()), number.end()
        for word, literal in _LITERALS.items():
            if text.startswith(word, position):
                return literal, position + len(word)
        raise self.fail("Expecting value", position)

    def object(self, position: int, depth: int) -> tuple[dict[Any, Any], int]:
        if depth >= NESTING_DEPTH_MAX:
            raise self.fail(f"nesting deeper than {NESTING_DEPTH_MAX} levels", position)
        result: dict[Any, Any] = {}
        position = self.skip_space(position + 1)
        if self.text.startswith("}", position):
            return result, position + 1
        while True:
            key, position = self.key(position, depth)
            position = self.skip_space(position)
            if not self.text.startswith(":", position):
                raise self.fail("Expecting ':' delimiter", position)
            value, position = self.value(self.skip_space(position + 1), depth + 1)
            result[key] = value
            position = self.skip_space(position)
            char = self.text[position:position + 1]
            if char == "}":
                return result, position + 1
            if char != ",":
                raise self.fail("Expecting ',' delimiter or '}'", position)
            position = self.skip_space(position + 1)

    def key(self, position: int, depth: int) -> tuple[Any, int]:
        """A quoted key, an unquoted number key or an object key, up to its ``:``."""
        char = self.text[position:position + 1]
        if char == '"':
            return self.string(position)
        if char == "{":
            members, position = self.object(position, depth + 1)
            return ObjectKey(sorted(members.items())), position
        match = _NUMBER_KEY.match(self.text, position)
        if match is None:
            raise self.fail("Expecting property name (a string, a number or an object)",
                            position)
        if not self.int_keys:
            return match.group(), match.end()
        if _INT_KEY.fullmatch(match.group()) is None:
            raise self.fail("Expecting an integer property name", position)
        return int(match.group()), match.end()

    def array(self, position: int, depth: int) -> tuple[list[Any], int]:
        if depth >= NESTING_DEPTH_MAX:
            raise self.fail(f"nesting deeper than {NESTING_DEPTH_MAX} levels", position)
        result: list[Any] = []
        position = self.skip_space(position + 1)
        if self.text.startswith("]", position):
            return result, position + 1
        while True:
            value, position = self.value(position, depth + 1)
            result.append(value)
            position = self.skip_space(position)
            char = self.text[position:position + 1]
            if char == "]":
                return result, position + 1
            if char != ",":
                raise self.fail("Expecting ',' delimiter or ']'", position)
            position = self.skip_space(position + 1)
