"""Frames of the remoting protocol: ``RemotingCommand``, both header forms, a bounded decoder.

One frame on the wire (all integers big-endian; ``reference/rocketmq-remoting.md`` §1)::

    offset size field
     0     4   LENGTH       bytes that follow this word: 4 + header + body
     4     4   HEADER WORD  high byte = serialize type (0 JSON, 1 ROCKETMQ binary),
                            low 24 bits = header length H
     8     H   HEADER       JSON object, or the binary layout of ``_decode_binary_header``
     8+H   ..  BODY         opaque bytes (a message body, records, or a JSON document)

Both header forms are decoded, whatever this side sends (a peer may answer in the other form);
this side encodes JSON unless asked otherwise. Every size is checked against ``FrameLimits``
before anything is allocated, and every malformed frame raises ``WireError`` (the server closes
that one connection). ``HeaderFields`` reads the custom header (``extFields``, every value a
string on the wire) with the checks input from the network needs: a missing or malformed field
raises ``HeaderFieldError`` naming it, never ``KeyError``/``ValueError``.

With the native engine (``storage_engine.formats.engine``), the JSON header form is decoded and
whole frames are encoded in Rust; the functions here stay the reference: the native ones return
exactly what these return, and decline (None) whatever lies outside their fast domain, which
these then decode or encode, errors included.

Pure, sans-IO: ``FrameDecoder.feed`` takes bytes as they arrive and returns whole commands, so the
server's and the client's socket loops share it. A ``FrameDecoder`` belongs to one connection
(not thread-safe); everything else is immutable or per-call.
"""

from __future__ import annotations

import itertools
import json
import json.encoder
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from postbox.storage_engine.formats.engine import native_function

from .codes import (
    CLIENT_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LANGUAGE_CODES,
    LANGUAGES,
)
from .fastjson import json_utf8

_LENGTH = struct.Struct(">i")
_HEADER_WORD = struct.Struct(">I")
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_MAX_INT32 = 2**31 - 1


class SerializeType(IntEnum):
    """How a frame's header is written (the high byte of the header word)."""

    JSON = 0
    ROCKETMQ = 1


class WireError(ValueError):
    """A frame that breaks the protocol: bad sizes, a header that does not parse, over a limit."""


class HeaderFieldError(WireError):
    """A custom-header field that is missing or not of its declared type."""

    def __init__(self, name: str, problem: str, *, missing: bool = False) -> None:
        super().__init__(f"header field {name!r}: {problem}")
        self.field_name = name
        self.missing = missing  # absent (Java: "the custom field <x> is null"), not malformed


@dataclass(frozen=True)
class FrameLimits:
    """Upper bounds a decoder enforces on every frame (every request is bounded).

    ``max_frame_bytes`` is RocketMQ's own default frame limit (16 MiB); a header holds names and
    numbers, never bodies, so it gets far less.
    """

    max_frame_bytes: int = 16 * 1024 * 1024
    max_header_bytes: int = 256 * 1024
    max_ext_fields: int = 512

    def __post_init__(self) -> None:
        if not 0 < self.max_header_bytes <= min(self.max_frame_bytes, 0xFFFFFF):
            raise ValueError("max_header_bytes must be positive, at most the frame limit "
                             "and 16 MiB - 1 (a 24-bit length)")


DEFAULT_LIMITS = FrameLimits()
_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _header_encoder() -> Callable[[dict[str, Any]], str]:
    """``_JSON_ENCODER.encode`` without building an encoder for every header: CPython's C
    encoder, made once (it keeps nothing between calls; a header has no cycles to check),
    or the pure-Python one where there is none. About 4 us less per frame."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _JSON_ENCODER.encode
    c_encoder = make(None, _JSON_ENCODER.default, json.encoder.encode_basestring, None, ":",
                     ",", False, False, True)
    return lambda document: "".join(c_encoder(document, 0))


_encode_header_json = _header_encoder()
_JSON_DECODER = json.JSONDecoder()
# The native engine's JSON header codec (None: pure Python). Each may decline (None) for input
# outside its fast domain; the reference below then decodes or encodes it, errors included.
_native_decode_json_header = native_function("decode_json_header")
_native_encode_json_frame = native_function("encode_json_frame")
_opaques = itertools.count(1)


def next_opaque() -> int:
    """A request id, unique in this process (wraps within int32)."""
    return next(_opaques) % _MAX_INT32


@dataclass
class RemotingCommand:
    """One request or response. ``ext_fields`` is the custom header (strings only)."""

    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    remark: str | None = None
    language: str = "PYTHON"
    version: int = CLIENT_VERSION

    @classmethod
    def request(cls, code: int, fields: dict[str, Any] | None = None, body: bytes = b"", *,
                oneway: bool = False, version: int = CLIENT_VERSION) -> RemotingCommand:
        """A new request with a fresh opaque; field values are turned into wire strings."""
        return cls(code=int(code), opaque=next_opaque(), flag=FLAG_ONEWAY if oneway else 0,
                   ext_fields=wire_fields(fields or {}), body=body, version=version)

    def response(self, code: int = 0, fields: dict[str, Any] | None = None, body: bytes = b"",
                 remark: str | None = None, *, version: int | None = None) -> RemotingCommand:
        """The answer to this request: same opaque, response flag set."""
        return RemotingCommand(code=int(code), opaque=self.opaque, flag=FLAG_RESPONSE,
                               ext_fields=wire_fields(fields or {}), body=body, remark=remark,
                               version=self.version if version is None else version)

    @property
    def is_response(self) -> bool:
        """Whether this is a response (flag bit 0)."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """Whether the sender expects no answer (flag bit 1)."""
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def fields(self) -> HeaderFields:
        """Typed reads of the custom header."""
        return HeaderFields(self.ext_fields)


def wire_fields(values: dict[str, Any]) -> dict[str, str]:
    """Header values as wire strings: None left out, booleans ``true``/``false``."""
    out: dict[str, str] = {}
    for name, value in values.items():
        kind = type(value)
        if kind is str:  # the common cases first: this runs for every request and answer
            out[name] = value
            continue
        if kind is int:
            out[name] = str(value)
            continue
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        else:
            out[name] = str(int(value)) if isinstance(value, IntEnum) else str(value)
    return out


class HeaderFields:
    """Typed, checked reads of a command's custom header."""

    __slots__ = ("_values",)
    _REQUIRED: Any = object()

    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def _raw(self, name: str, default: Any) -> str | None:
        value = self._values.get(name)
        if value is None:
            if default is self._REQUIRED:
                raise HeaderFieldError(name, "is required and missing", missing=True)
            return None
        return value

    def get_str(self, name: str, default: Any = _REQUIRED, *, max_chars: int = 4096) -> Any:
        """A string field (at most ``max_chars``), or ``default`` when absent."""
        value = self._raw(name, default)
        if value is None:
            return default
        if len(value) > max_chars:
            raise HeaderFieldError(name, f"is {len(value)} characters, over {max_chars}")
        return value

    def get_int(self, name: str, default: Any = _REQUIRED, *, low: int = -(2**63),
            high: int = 2**63 - 1) -> Any:
        """An integer field within ``[low, high]``, or ``default`` when absent."""
        value = self._raw(name, default)
        if value is None:
            return default
        if len(value) <= 20 and value.isascii() and (
                value.isdigit() or (value[:1] == "-" and value[1:].isdigit())):
            number = int(value)
        else:
            text = value.strip()
            if (not text or len(text) > 20 or not text.isascii()
                    or not text.removeprefix("-").isdigit()):
                raise HeaderFieldError(name, f"{value[:40]!r} is not an integer")
            number = int(text)
        if not low <= number <= high:
            raise HeaderFieldError(name, f"{number} is outside [{low}, {high}]")
        return number

    def get_bool(self, name: str, default: Any = _REQUIRED) -> Any:
        """A ``true``/``false`` field (Java's parse: anything but ``true`` is false)."""
        value = self._raw(name, default)
        if value is None:
            return default
        return value.strip().lower() == "true"


def encode(command: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON
           ) -> bytes:
    """The whole frame of ``command``, length word included."""
    if serialize_type is SerializeType.JSON and _native_encode_json_frame is not None:
        frame: bytes | None = _native_encode_json_frame(
            command.code, command.flag, command.language, command.opaque, command.version,
            command.ext_fields, command.remark, command.body)
        if frame is not None:
            return frame
    return _encode_reference(command, serialize_type)


def _encode_reference(command: RemotingCommand, serialize_type: SerializeType) -> bytes:
    """``encode`` in pure Python: the reference the native engine's frame encoder matches."""
    if serialize_type is SerializeType.JSON:
        header = _encode_json_header(command)
    else:
        header = _encode_binary_header(command)
    if len(header) > 0xFFFFFF:
        raise WireError(f"header of {len(header)} bytes does not fit a 24-bit length")
    word = (int(serialize_type) << 24) | len(header)
    length = 4 + len(header) + len(command.body)
    return b"".join((_LENGTH.pack(length), _HEADER_WORD.pack(word), header, command.body))


def _encode_json_header(command: RemotingCommand) -> bytes:
    document: dict[str, Any] = {
        "code": command.code, "flag": command.flag, "language": command.language,
        "opaque": command.opaque, "serializeTypeCurrentRPC": "JSON",
        "version": command.version,
    }
    if command.ext_fields:
        document["extFields"] = command.ext_fields
    if command.remark is not None:
        document["remark"] = command.remark
    return json_utf8(_encode_header_json(document))


def _utf8_text(text: str) -> bytes:
    """Plain text (a binary header's strings) as UTF-8; a lone surrogate becomes ``?``."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _encode_binary_header(command: RemotingCommand) -> bytes:
    parts = [_BINARY_FIXED.pack(command.code, LANGUAGE_CODES.get(command.language, 7),
                                command.version, command.opaque, command.flag)]
    remark = _utf8_text(command.remark or "")
    parts += [_I32.pack(len(remark)), remark]
    entries = []
    for key, value in command.ext_fields.items():
        raw_key, raw_value = _utf8_text(key), _utf8_text(value)
        entries += [_I16.pack(len(raw_key)), raw_key, _I32.pack(len(raw_value)), raw_value]
    table = b"".join(entries)
    parts += [_I32.pack(len(table)), table]
    return b"".join(parts)


def decode(frame: bytes | bytearray | memoryview,
           limits: FrameLimits = DEFAULT_LIMITS) -> RemotingCommand:
    """One command from a frame **without** its length word (what follows it)."""
    view = memoryview(frame)
    if len(view) < 4:
        raise WireError(f"frame of {len(view)} bytes has no header word")
    (word,) = _HEADER_WORD.unpack_from(view, 0)
    kind, header_length = word >> 24, word & 0xFFFFFF
    if header_length > limits.max_header_bytes:
        raise WireError(f"header of {header_length} bytes is over the limit of "
                        f"{limits.max_header_bytes}")
    if 4 + header_length > len(view):
        raise WireError(f"header length {header_length} runs past the frame "
                        f"({len(view)} bytes)")
    header = view[4:4 + header_length]
    body = bytes(view[4 + header_length:])
    if kind == SerializeType.JSON:
        parts = (None if _native_decode_json_header is None
                 else _native_decode_json_header(header, limits.max_ext_fields))
        if parts is not None:
            code, opaque, flag, fields, remark, language, version = parts
            return RemotingCommand(code, opaque, flag, fields, body, remark, language, version)
        command = _decode_json_header(header, limits)
    elif kind == SerializeType.ROCKETMQ:
        command = _decode_binary_header(header, limits)
    else:
        raise WireError(f"unknown serialize type {kind}")
    command.body = body
    return command


def _decode_json_header(header: memoryview, limits: FrameLimits) -> RemotingCommand:
    try:
        document = _JSON_DECODER.decode(str(header, "utf-8"))
    except ValueError as error:  # UnicodeDecodeError included
        raise WireError(f"JSON header does not parse: {error}") from None
    except RecursionError:  # nested deeper than the interpreter's stack
        raise WireError("JSON header is nested too deeply") from None
    if not isinstance(document, dict):
        raise WireError("JSON header is not an object")
    get = document.get
    code, opaque, flag, version = get("code", 0), get("opaque", 0), get("flag", 0), get(
        "version", 0)
    if not (type(code) is type(opaque) is type(flag) is type(version) is int
            and min(code, opaque, flag, version) >= -(2**31)
            and max(code, opaque, flag, version) < 2**31):  # else name the bad one
        code, opaque, flag, version = (
            _json_int(document, "code"), _json_int(document, "opaque"),
            _json_int(document, "flag"), _json_int(document, "version"))
    language = document.get("language", "OTHER")
    remark = document.get("remark")
    ext = document.get("extFields") or {}
    if not isinstance(language, str) or not (remark is None or isinstance(remark, str)):
        raise WireError("JSON header: language and remark must be strings")
    if not isinstance(ext, dict):
        raise WireError("JSON header: extFields must be an object")
    if len(ext) > limits.max_ext_fields:
        raise WireError(f"{len(ext)} header fields, over the limit of {limits.max_ext_fields}")
    if all(type(value) is str for value in ext.values()):
        fields: dict[str, str] = ext  # the common case: what every peer sends
    else:
        fields = _string_fields(ext)
    return RemotingCommand(code=code, opaque=opaque, flag=flag, ext_fields=fields,
                           remark=remark, language=language, version=version)


def _string_fields(ext: dict[str, Any]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for key, value in ext.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | float):
            value = str(value)
        elif not isinstance(value, str):
            raise WireError(f"JSON header: extFields[{key!r}] is not a string")
        fields[key] = value
    return fields


def _json_int(document: dict[str, Any], name: str) -> int:
    value = document.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise WireError(f"JSON header: {name} must be an int32, not {value!r}")
    return value


def _decode_binary_header(header: memoryview, limits: FrameLimits) -> RemotingCommand:
    reader = _Reader(header)
    code, language_code, version, opaque, flag = reader.unpack(_BINARY_FIXED)
    remark = reader.text(reader.unpack(_I32)[0]) or None
    table_length = reader.unpack(_I32)[0]
    table = _Reader(reader.take(table_length))
    fields: dict[str, str] = {}
    while table.remaining:
        if len(fields) >= limits.max_ext_fields:
            raise WireError(f"over {limits.max_ext_fields} header fields")
        key = table.text(table.unpack(_I16)[0])
        fields[key] = table.text(table.unpack(_I32)[0])
    if reader.remaining:
        raise WireError(f"{reader.remaining} bytes left after the binary header")
    language = LANGUAGES[language_code] if language_code < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code=code, opaque=opaque, flag=flag, ext_fields=fields,
                           remark=remark, language=language, version=version)


class _Reader:
    """Checked sequential reads of a binary header."""

    __slots__ = ("_at", "_view")

    def __init__(self, view: memoryview) -> None:
        self._view, self._at = view, 0

    @property
    def remaining(self) -> int:
        return len(self._view) - self._at

    def take(self, size: int) -> memoryview:
        if size < 0 or size > self.remaining:
            raise WireError(f"binary header: length {size} runs past its end "
                            f"({self.remaining} bytes left)")
        chunk = self._view[self._at:self._at + size]
        self._at += size
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        return layout.unpack(self.take(layout.size))

    def text(self, size: int) -> str:
        try:
            return bytes(self.take(size)).decode()
        except UnicodeDecodeError as error:
            raise WireError(f"binary header: text is not UTF-8 ({error})") from None


class FrameDecoder:
    """Whole commands out of a byte stream, bounded by ``limits`` (one per connection).

    ``feed`` takes bytes and returns every command they complete; ``append`` + ``next_command``
    decode one frame at a time, leaving the rest buffered (the server stops between two frames
    when a connection has too much in flight).
    """

    def __init__(self, limits: FrameLimits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._buffer = bytearray()
        self._at = 0  # start of the first frame not yet decoded

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """The commands completed by ``data``; raises ``WireError`` on a malformed frame."""
        self.append(data)
        commands = []
        while (command := self.next_command()) is not None:
            commands.append(command)
        return commands

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer ``data`` (decoded by ``next_command``)."""
        if self._at:
            del self._buffer[:self._at]
            self._at = 0
        self._buffer += data

    def next_command(self) -> RemotingCommand | None:
        """The next whole command buffered, or None; ``WireError`` on a malformed frame."""
        buffer, at = self._buffer, self._at
        if len(buffer) - at < 4:
            return None
        (length,) = _LENGTH.unpack_from(buffer, at)
        if length < 4 or length > self._limits.max_frame_bytes:
            raise WireError(f"frame length {length} is outside [4, "
                            f"{self._limits.max_frame_bytes}]")
        if len(buffer) - at - 4 < length:
            return None
        with memoryview(buffer) as view:  # decoded in place: a slice of it copies nothing
            command = decode(view[at + 4:at + 4 + length], self._limits)
        self._at = at + 4 + length
        if self._at == len(buffer):
            buffer.clear()
            self._at = 0
        return command

    def has_frame(self) -> bool:
        """Whether a whole frame (or a frame length out of bounds) is buffered."""
        buffer, at = self._buffer, self._at
        if len(buffer) - at < 4:
            return False
        (length,) = _LENGTH.unpack_from(buffer, at)
        return len(buffer) - at - 4 >= length or not 4 <= length <= self._limits.max_frame_bytes

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet decoded."""
        return len(self._buffer) - self._at
