"""Which engine codes records: the optional native extension or the pure-Python reference.

``POSTBOX_NATIVE`` chooses, once, when this module is imported: ``auto`` (the default, also
when unset or empty) takes the native engine when the ``postbox_native`` extension (the
``postbox-native`` distribution, built from ``native/``) is importable and the pure-Python one
otherwise; ``1`` requires the native engine (``NativeEngineError`` when it is not installed or
was built for another record format); ``0`` keeps pure Python. ``ENGINE`` names the result
(``postbox --version`` and ``postbox store stats`` print it).

The functions below are the hot-path codecs under their reference names; callers on the put
and pull paths import them from here. The native functions return exactly what the reference
returns, byte for byte, and hand whatever lies outside their fast path (an integer that does
not fit, an unusual layout, a malformed record) to the reference, so every error is the
reference's error. ``walk_records`` (the store scan's loop) shares its reference's contract
instead: it may stop early, at any record outside its fast path, and the caller takes that
record itself. ``scan_records`` and ``decode_run`` (recovery's scan and dispatch's decoding)
and the Java hashes are exact like the codecs. An extension built before a function existed
leaves that function to the reference. The
reference modules (``record``, ``record_walk``, ``properties``, ``hashing``,
``received_record``) stay pure Python and are what the differential tests compare against.

The one place outside the command line that reads an environment variable: the engine is a
property of the process, like the interpreter, and must be fixed before any record is coded.
Immutable after import; thread-safe.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from . import hashing, properties, received_record, record, record_walk

NATIVE_VARIABLE = "POSTBOX_NATIVE"
NATIVE_MODULE = "postbox_native"
NATIVE_FORMAT_VERSION = 1
"""The record format generation this Python code expects of the extension."""
PYTHON, NATIVE = "python", "native"


class NativeEngineError(ImportError):
    """``POSTBOX_NATIVE`` asks for an engine that cannot run (the message says how to fix it)."""


def load_native(setting: str | None) -> ModuleType | None:
    """The native module ``setting`` (a ``POSTBOX_NATIVE`` value) asks for, or None.

    Raises:
        NativeEngineError: ``1`` and the extension is missing or of another format version;
            a value other than ``0``, ``1``, ``auto`` or empty.
    """
    choice = (setting or "auto").strip().lower()
    if choice not in ("0", "1", "auto"):
        raise NativeEngineError(f"{NATIVE_VARIABLE}={setting!r}: use 0 (pure Python), 1 (the "
                                "native engine, required) or auto (native when installed)")
    if choice == "0":
        return None
    try:
        module = importlib.import_module(NATIVE_MODULE)
    except ImportError as error:
        if choice == "auto":
            return None
        raise NativeEngineError(
            f"{NATIVE_VARIABLE}=1 but the native engine is not installed ({error}): build it "
            "with `make` on a machine with cargo (it installs postbox-native from native/), "
            f"or set {NATIVE_VARIABLE}=auto or 0 for the pure-Python engine") from error
    found = getattr(module, "FORMAT_VERSION", None)
    if found != NATIVE_FORMAT_VERSION:
        if choice == "auto":
            return None
        raise NativeEngineError(
            f"{NATIVE_VARIABLE}=1 but the installed postbox-native codes record format "
            f"{found}, this Postbox expects {NATIVE_FORMAT_VERSION}: rebuild it with `make`")
    return module


def native_function(name: str) -> Callable[..., Any] | None:
    """The native engine's function ``name`` for a caller whose reference lives above this
    package (the remoting frame codec of ``network.protocol.wire``), or None: pure Python, or
    an extension built before that function existed. Such a function may decline (it returns
    None) and its caller then runs its reference."""
    return None if _native is None else getattr(_native, name, None)


def engine_description(module: ModuleType | None) -> str:
    """``native (postbox-native 0.1.0)`` or ``python``: what ``--version`` prints."""
    if module is None:
        return PYTHON
    return f"{NATIVE} (postbox-native {getattr(module, '__version__', '?')})"


_native = load_native(os.environ.get(NATIVE_VARIABLE))
ENGINE = PYTHON if _native is None else NATIVE
"""``"native"`` or ``"python"``: the engine this process codes records with."""
ENGINE_DESCRIPTION = engine_description(_native)

masked_crc32: Callable[[Any], int] = hashing.masked_crc32
encode_properties: Callable[[Mapping[str, str | None]], bytes] = properties.encode_properties
decode_properties: Callable[[Any], dict[str, str]] = properties.decode_properties
encode_record_parts: Callable[..., bytes] = record.encode_record_parts
seal_property_crc: Callable[[bytes], bytes] = record.seal_property_crc
unpack_record: Callable[[Any, int], tuple[Any, ...]] = record.unpack_record
unpack_received_record: Callable[[bytes, int, int], tuple[Any, ...]] = (
    received_record.unpack_received_record)
unpack_received_records: Callable[[bytes, int, int], list[tuple[Any, ...]]] = (
    received_record.unpack_received_records)
walk_records: Callable[..., tuple[list[int], int]] = record_walk.walk_records
scan_records: Callable[..., tuple[int, int]] = record.scan_records
decode_run: Callable[[Any, int, int, int], list[record.DispatchRecord]] = record.decode_run
java_string_hashcode: Callable[[str], int] = hashing.java_string_hashcode
index_key_hash: Callable[[str], int] = hashing.index_key_hash
if _native is not None:
    masked_crc32 = _native.masked_crc32
    encode_properties = _native.encode_properties
    decode_properties = _native.decode_properties
    encode_record_parts = _native.encode_record_parts
    seal_property_crc = _native.seal_property_crc
    unpack_record = _native.unpack_record
    unpack_received_record = _native.unpack_received_record
    unpack_received_records = _native.unpack_received_records
    walk_records = getattr(_native, "walk_records", record_walk.walk_records)
    scan_records = getattr(_native, "scan_records", record.scan_records)
    decode_run = getattr(_native, "decode_run", record.decode_run)
    java_string_hashcode = getattr(_native, "java_string_hashcode", hashing.java_string_hashcode)
    index_key_hash = getattr(_native, "index_key_hash", hashing.index_key_hash)

__all__ = [
    "ENGINE",
    "ENGINE_DESCRIPTION",
    "NATIVE",
    "NATIVE_VARIABLE",
    "PYTHON",
    "NativeEngineError",
    "decode_properties",
    "decode_run",
    "encode_properties",
    "encode_record_parts",
    "engine_description",
    "index_key_hash",
    "java_string_hashcode",
    "load_native",
    "masked_crc32",
    "native_function",
    "scan_records",
    "seal_property_crc",
    "unpack_received_record",
    "unpack_received_records",
    "unpack_record",
    "walk_records",
]
