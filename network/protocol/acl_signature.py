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

ACL 1.0 signs the header fields and the body, not the request code, opaque or flags, and
carries no time: a captured request can be replayed, and, as far as the signature goes, under
another code. Signing the code itself would break every official client (their servers
rebuild the content from the fields alone), so the code is bound in two ways official clients
still pass (``code_problem``, checked by the server after ``verify``):

- ``sign_request`` (Postbox's own clients) adds the field ``SignedCode`` = the request code
  before signing; a request carrying it must carry it for its own code, and removing or
  changing it breaks the signature. Apache's servers sign and check every field, so they
  accept it as well.
- A request without it (an official client's) that deletes something (a topic, a group, a
  registration, a KV entry) may carry only the fields of that code's own header
  (``DELETION_FIELDS``), so a captured topic creation cannot be replayed as the topic's
  deletion. A capture of another code with exactly the same fields (e.g. a topic-stats query
  carries just ``topic``, as a topic deletion does) still passes: only TLS (or a trusted
  network) between clients and the broker stops replays.

Pure; safe from any thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from .codes import VERSION_V4_9_3, RequestCode
from .wire import RemotingCommand

ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
SIGNED_CODE = "SignedCode"
_SIGNING_FIELDS = frozenset({ACCESS_KEY, SECURITY_TOKEN, SIGNATURE, SIGNED_CODE})
_RPC_FIELDS = frozenset({"ns", "nsd", "bname", "oway", "lo"})
"""Fields RocketMQ 5 clients add to every request header (namespace, broker name, oneway,
logical queue)."""
DELETION_FIELDS: dict[int, frozenset[str]] = {
    RequestCode.DELETE_TOPIC_IN_BROKER: frozenset({"topic"}),
    RequestCode.DELETE_SUBSCRIPTIONGROUP: frozenset({"groupName", "cleanOffset"}),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: frozenset({"topic", "clusterName"}),
    RequestCode.UNREGISTER_BROKER: frozenset({"brokerName", "brokerAddr", "clusterName",
                                              "brokerId"}),
    102: frozenset({"namespace", "key"}),  # DELETE_KV_CONFIG
}
"""The header fields of each deleting request code (besides the signing and RPC fields)."""


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
    command.ext_fields[SIGNED_CODE] = str(command.code)
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


def code_problem(command: RemotingCommand) -> str | None:
    """Why ``command``'s (verified) signature does not hold for its request code, or None."""
    signed = command.ext_fields.get(SIGNED_CODE)
    if signed is not None:
        if signed != str(command.code):
            return (f"the signature was made for request code {signed[:12]!r}, not "
                    f"{command.code}")
        return None
    allowed = DELETION_FIELDS.get(command.code)
    if allowed is None:
        return None
    foreign = sorted(set(command.ext_fields) - allowed - _SIGNING_FIELDS - _RPC_FIELDS)
    if foreign:
        return (f"request code {command.code} carries signed fields its header does not have "
                f"({', '.join(name[:40] for name in foreign[:5])}): a request signed for "
                "another code is not replayed as a deletion")
    return None


__all__ = ["ACCESS_KEY", "DELETION_FIELDS", "SECURITY_TOKEN", "SIGNATURE", "SIGNED_CODE",
           "UNIQUE_KEY_QUERY", "code_problem", "sign", "sign_request", "signature_content",
           "verify"]
