"""AK/SK authentication and per-key rights, compatible with RocketMQ 5 clients' signed calls.

A RocketMQ 5 client signs every call with gRPC metadata::

    x-mq-date-time: 20240102T030405Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                    Signature=<hex HMAC-SHA1(secret key, x-mq-date-time)>

(plus ``x-mq-client-id``, ``x-mq-request-id`` …). ``signed_metadata`` produces the same for
Postbox's own clients. ``AccessControl`` verifies it: known access key, a signature that
matches (constant-time compare), and a date-time within ``clock_skew_s`` of the server's
clock. The official Python client formats its *local* time with a literal ``Z``, so the
date-time is accepted when it is within the window read either as UTC or as local time.
Signatures are not bound to the request body (the protocol signs only the date-time), so a
captured header can be replayed within the window: use TLS in front of the server on
untrusted networks.

Rights come from the ACL file (``acl_file``): PUB on a topic to send, SUB on topics and groups
to consume, the create right to make a topic exist (explicitly or by sending to a new one); which
call checks what on which names is the table in docs/remoting.md. ``authorize`` aborts a gRPC
call (``UNAUTHENTICATED`` / ``PERMISSION_DENIED``); ``check`` raises ``AccessDeniedError`` for
services that answer with a status instead (the MessagingService answers v2 ``UNAUTHORIZED`` /
``FORBIDDEN``).

Thread-safety: ``AccessControl`` is immutable after construction; every method may be called
from any thread.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from postbox.storage_engine.clock import Clock, SystemClock

from ..acl_file import PUB, SUB, Account, AclSettings, load_acl_file
from .protocol import Code

DATE_TIME_KEY = "x-mq-date-time"
AUTHORIZATION_KEY = "authorization"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
CLIENT_VERSION = "postbox-0.1"
AUTHORIZATION_LENGTH_MAX = 1024


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret."""

    access_key: str
    secret_key: str


def sign(secret_key: str, date_time: str) -> str:
    """Hex HMAC-SHA1 of ``date_time`` keyed by ``secret_key`` (what RocketMQ clients send)."""
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"),
                    hashlib.sha1).hexdigest()


def signed_metadata(credentials: Credentials, client_id: str) -> list[tuple[str, str]]:
    """gRPC metadata for one call, signed like RocketMQ 5 clients sign (x-mq-date-time,
    authorization, x-mq-client-id …). The date-time is UTC."""
    date_time = time.strftime(DATE_TIME_FORMAT, time.gmtime())
    authorization = (f"{ALGORITHM} Credential={credentials.access_key}, "
                     f"SignedHeaders={DATE_TIME_KEY}, "
                     f"Signature={sign(credentials.secret_key, date_time)}")
    return [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"),
            ("x-mq-client-version", CLIENT_VERSION), (DATE_TIME_KEY, date_time),
            ("x-mq-request-id", str(uuid.uuid4())), ("x-mq-client-id", client_id),
            (AUTHORIZATION_KEY, authorization)]


class AccessDeniedError(Exception):
    """A call failed authentication (``UNAUTHENTICATED``) or lacks a right
    (``PERMISSION_DENIED``); ``v2_code`` is the RocketMQ v2 code for a status answer."""

    def __init__(self, grpc_code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.grpc_code = grpc_code
        self.v2_code = (Code.UNAUTHORIZED if grpc_code is grpc.StatusCode.UNAUTHENTICATED
                        else Code.FORBIDDEN)


class AccessControl:
    """Verifies signed calls against the accounts of an ACL file."""

    def __init__(self, settings: AclSettings, *, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()

    @classmethod
    def load(cls, path: str | Path) -> AccessControl:
        """Read an ACL file (format in ``acl_file``); ``ConfigError`` when it is invalid."""
        return cls(load_acl_file(path))

    def authorize(self, context: grpc.ServicerContext, *, topics: Iterable[str] = (),
                  groups: Iterable[str] = (), write: bool = False,
                  create: Iterable[str] = (), describe: Iterable[str] = ()) -> Account:
        """Authenticate the call's metadata and check its rights (as ``check``); aborts the
        call (context.abort) with UNAUTHENTICATED or PERMISSION_DENIED otherwise."""
        try:
            return self.check(context.invocation_metadata(), topics=topics, groups=groups,
                              write=write, create=create, describe=describe)
        except AccessDeniedError as error:
            context.abort(error.grpc_code, str(error))
            raise  # not reached: abort raises

    def check(self, metadata: Iterable[tuple[str, str | bytes]], *, topics: Iterable[str] = (),
              groups: Iterable[str] = (), write: bool = False,
              create: Iterable[str] = (), describe: Iterable[str] = ()) -> Account:
        """The caller's account; ``AccessDeniedError`` when unauthenticated or not allowed:
        ``topics`` need PUB (``write``) or SUB, ``groups`` SUB, ``create`` (topics the call
        would create) the account's create right, ``describe`` (topics whose metadata is
        read) PUB or SUB."""
        account = self.authenticate(metadata)
        right = PUB if write else SUB
        for topic in topics:
            if not account.may("topic", topic, right):
                raise _forbidden(account, f"no {right} right on topic {topic!r}")
        for group in groups:
            if not account.may("group", group, SUB):
                raise _forbidden(account, f"no SUB right on group {group!r}")
        for topic in create:
            if not account.may_create_topics:
                raise _forbidden(account, f"no right to create topic {topic!r} (it does not "
                                          "exist; the ACL file's create_topics grants it)")
        for topic in describe:
            if not (account.may("topic", topic, PUB) or account.may("topic", topic, SUB)):
                raise _forbidden(account, f"no right on topic {topic!r}")
        return account

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]]) -> Account:
        """The account whose valid signature the metadata carries."""
        values = {key: value for key, value in metadata
                  if key in (DATE_TIME_KEY, AUTHORIZATION_KEY) and isinstance(value, str)}
        header, date_time = values.get(AUTHORIZATION_KEY), values.get(DATE_TIME_KEY)
        if not header or not date_time:
            raise _unauthenticated("the call is not signed (authorization and x-mq-date-time "
                                   "metadata are required)")
        access_key, signature = _parse_authorization(header)
        account = self._settings.accounts.get(access_key)
        if account is None:
            raise _unauthenticated(f"unknown access key {access_key[:128]!r}")
        if not hmac.compare_digest(signature.lower(), sign(account.secret_key, date_time)):
            raise _unauthenticated(f"bad signature for access key {access_key!r}")
        self._check_time(date_time)
        return account

    def _check_time(self, date_time: str) -> None:
        try:
            fields = time.strptime(date_time, DATE_TIME_FORMAT)
        except ValueError as error:
            raise _unauthenticated(f"x-mq-date-time {date_time[:32]!r} is not "
                                   "yyyyMMddTHHmmssZ") from error
        now_s = self._clock.now_ms() / 1000
        skew_s = self._settings.clock_skew_s
        as_utc_s = calendar.timegm(fields)
        as_local_s = time.mktime(fields)  # the official client sends local time with a "Z"
        if min(abs(as_utc_s - now_s), abs(as_local_s - now_s)) > skew_s:
            raise _unauthenticated(f"x-mq-date-time {date_time} is more than {skew_s} s away "
                                   "from the server's clock")


def _parse_authorization(header: str) -> tuple[str, str]:
    """(access key, signature) of an ``authorization`` value."""
    if len(header) > AUTHORIZATION_LENGTH_MAX or not header.startswith(ALGORITHM + " "):
        raise _unauthenticated(f"authorization must use {ALGORITHM}")
    fields = {}
    for part in header[len(ALGORITHM) + 1:].split(","):
        name, separator, value = part.strip().partition("=")
        if separator:
            fields[name] = value.strip()
    credential, signature = fields.get("Credential"), fields.get("Signature")
    if not credential or not signature:
        raise _unauthenticated("authorization lacks Credential or Signature")
    if fields.get("SignedHeaders", DATE_TIME_KEY).lower() != DATE_TIME_KEY:
        raise _unauthenticated(f"SignedHeaders must be {DATE_TIME_KEY}")
    return credential.split("/", 1)[0], signature


def _forbidden(account: Account, message: str) -> AccessDeniedError:
    return AccessDeniedError(grpc.StatusCode.PERMISSION_DENIED,
                             f"access key {account.access_key!r} has {message}")


def _unauthenticated(message: str) -> AccessDeniedError:
    return AccessDeniedError(grpc.StatusCode.UNAUTHENTICATED, message)


__all__ = ["AccessControl", "AccessDeniedError", "Credentials", "sign", "signed_metadata"]
