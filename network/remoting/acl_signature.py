"""RocketMQ's ACL 1.0 request signature (``reference/rocketmq-remoting.md`` §6), both sides.

A signed request carries ``AccessKey`` (and ``SecurityToken`` when the credentials have one) and
``Signature`` among its custom header fields (``extFields``)::

    content   = the VALUES of every header field except Signature, ordered by field NAME
                (Java String order: UTF-16 code units), concatenated, UTF-8 encoded
                + the raw body bytes
    Signature = Base64(HMAC-SHA1(secret key, content))

``sign`` computes it; ``sign_request`` adds ``AccessKey`` then ``Signature`` to a request (the
client side); ``verify`` checks a received request (the server side) in constant time. For
requests of version ≤ V4_9_3 the server leaves ``_UNIQUE_KEY_QUERY`` out of the content: those
clients add that field after signing.

The signature covers the header fields and the body, not the request code, opaque or flags,
and carries no time: a captured request can be replayed. Use TLS (or a trusted network) between
clients and the broker.

Pure; safe from any thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from .codes import VERSION_V4_9_3
from .wire import RemotingCommand

ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def _java_order(name: str) -> bytes:
    """Sort key equal to Java's ``String.compareTo`` (UTF-16 code units, big-endian bytes)."""
    return name.encode("utf-16-be", "surrogatepass")


def signature_content(ext_fields: Mapping[str, str], body: bytes = b"", *,
                      leave_out: frozenset[str] = frozenset()) -> bytes:
    """The bytes that are signed: sorted field values (Signature excluded), then the body."""
    names = sorted((name for name in ext_fields if name != SIGNATURE and name not in leave_out),
                   key=_java_order)
    return "".join(ext_fields[name] for name in names).encode("utf-8") + bytes(body)


def sign(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
    """Base64 HMAC-SHA1 of the signature content keyed by ``secret_key``."""
    digest = hmac.new(secret_key.encode("utf-8"), signature_content(ext_fields, body),
                      hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_request(command: RemotingCommand, access_key: str, secret_key: str,
                 security_token: str | None = None) -> RemotingCommand:
    """Add ``AccessKey`` (and ``SecurityToken``) and ``Signature`` to ``command``; returns it."""
    command.ext_fields.pop(SIGNATURE, None)
    command.ext_fields[ACCESS_KEY] = access_key
    if security_token:
        command.ext_fields[SECURITY_TOKEN] = security_token
    command.ext_fields[SIGNATURE] = sign(command.ext_fields, command.body, secret_key)
    return command


def verify(command: RemotingCommand, secret_key: str) -> bool:
    """Whether ``command``'s ``Signature`` matches its fields and body under ``secret_key``."""
    signature = command.ext_fields.get(SIGNATURE)
    if not signature:
        return False
    leave_out = (frozenset({UNIQUE_KEY_QUERY}) if command.version <= VERSION_V4_9_3
                 else frozenset())
    content = signature_content(command.ext_fields, command.body, leave_out=leave_out)
    expected = base64.b64encode(hmac.new(secret_key.encode("utf-8"), content,
                                         hashlib.sha1).digest()).decode("ascii")
    return hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8",
                                                                          "surrogatepass"))


__all__ = ["ACCESS_KEY", "SECURITY_TOKEN", "SIGNATURE", "UNIQUE_KEY_QUERY", "sign",
           "sign_request", "signature_content", "verify"]
