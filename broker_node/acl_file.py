"""The access-control file of ``postbox broker start --acl FILE``: accounts and their rights.

Format (JSON, UTF-8)::

    {
      "clock_skew_s": 900,
      "accounts": [
        {"access_key": "orders-app", "secret_key": "s3cret",
         "topics": {"orders": "PUB|SUB", "audit": "PUB", "*": "DENY"},
         "groups": {"billing": "SUB"}, "create_topics": false},
        {"access_key": "ops", "secret_key": "…", "admin": true}
      ]
    }

* ``clock_skew_s`` (optional, default 900): how far a request's signed ``x-mq-date-time`` may
  be from the server's clock, either way.
* Each account: ``access_key`` (1..128 characters from ``[A-Za-z0-9_.@-]``), ``secret_key``
  (non-empty), and either ``"admin": true`` (every topic and group) or ``topics`` / ``groups``:
  a name (or ``"*"``, the default for names not listed) → ``"PUB"``, ``"SUB"``,
  ``"PUB|SUB"`` or ``"DENY"``. Sending needs PUB on the topic; receiving, acknowledging and
  offsets need SUB on the topic and on the group. A name that is not listed and no ``"*"``
  means DENY.
* ``create_topics`` (optional, default false): the account may create topics — explicitly
  (``CreateTopic``, which also updates an existing topic's queues and perm) or by sending to
  a topic that does not exist yet (auto-creation). Without it such a send is refused and
  nothing is created. ``admin`` implies it.
* A group's retry and dead-letter topics (``%RETRY%g``, ``%DLQ%g``) are not covered by ``"*"``:
  SUB on them comes with SUB on group ``g`` (or an entry naming the topic exactly); PUB on them
  is never granted (only the broker writes them). Internal topics of the broker
  (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``) are not covered by ``"*"`` either.

Pure apart from ``load_acl_file`` (one read). Values are frozen.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from postbox.storage_engine.errors import ConfigError
from postbox.storage_engine.formats.topic_names import (
    is_internal_topic,
    is_system_group_topic,
)

DEFAULT_CLOCK_SKEW_S = 900
CLOCK_SKEW_MAX_S = 24 * 3600
WILDCARD = "*"
PUB = "PUB"
SUB = "SUB"
_PERMISSIONS = {"PUB": frozenset({PUB}), "SUB": frozenset({SUB}),
                "PUB|SUB": frozenset({PUB, SUB}), "SUB|PUB": frozenset({PUB, SUB}),
                "DENY": frozenset()}
_ACCESS_KEY = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
ACL_FILE_SIZE_MAX_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Account:
    """One access key with its secret and rights."""

    access_key: str
    secret_key: str
    admin: bool = False
    topics: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    groups: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    create_topics: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", MappingProxyType(dict(self.topics)))
        object.__setattr__(self, "groups", MappingProxyType(dict(self.groups)))

    def may(self, kind: str, name: str, right: str) -> bool:
        """Whether this account has ``right`` (PUB or SUB) on topic/group ``name``."""
        if self.admin:
            return True
        table = self.topics if kind == "topic" else self.groups
        rights = table.get(name)
        if kind == "topic" and is_system_group_topic(name):
            if right != SUB:
                return False  # only the broker writes retry and dead-letter topics
            group = name.split("%", 2)[2]
            return (rights is not None and SUB in rights) or self.may("group", group, SUB)
        if rights is None and not _internal(kind, name):
            rights = table.get(WILDCARD)
        return right in (rights or ())

    @property
    def may_create_topics(self) -> bool:
        """Whether this account may create topics (explicitly or by sending)."""
        return self.admin or self.create_topics


def _internal(kind: str, name: str) -> bool:
    return kind == "topic" and is_internal_topic(name)


@dataclasses.dataclass(frozen=True)
class AclSettings:
    """Everything an ACL file says."""

    accounts: Mapping[str, Account]
    clock_skew_s: int = DEFAULT_CLOCK_SKEW_S


def load_acl_file(path: str | Path) -> AclSettings:
    """Read and check an ACL file; ``ConfigError`` names the file and the problem."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(ACL_FILE_SIZE_MAX_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read ACL file {path}: {error.strerror}") from error
    if len(raw) > ACL_FILE_SIZE_MAX_BYTES:
        raise ConfigError(f"ACL file {path} is larger than {ACL_FILE_SIZE_MAX_BYTES} bytes")
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"ACL file {path} is not UTF-8 JSON: {error}") from error
    try:
        return parse_acl(document)
    except ConfigError as error:
        raise ConfigError(f"ACL file {path}: {error}") from error


def parse_acl(document: Any) -> AclSettings:
    """``AclSettings`` from the parsed JSON document."""
    if not isinstance(document, dict) or not isinstance(document.get("accounts"), list):
        raise ConfigError('the top level must be an object with an "accounts" list')
    unknown = set(document) - {"accounts", "clock_skew_s"}
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)}")
    skew = document.get("clock_skew_s", DEFAULT_CLOCK_SKEW_S)
    if type(skew) is not int or not 0 < skew <= CLOCK_SKEW_MAX_S:
        raise ConfigError(f"clock_skew_s must be an integer in 1..{CLOCK_SKEW_MAX_S}, "
                          f"got {skew!r}")
    accounts: dict[str, Account] = {}
    for index, entry in enumerate(document["accounts"]):
        account = _account(index, entry)
        if account.access_key in accounts:
            raise ConfigError(f"access key {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return AclSettings(MappingProxyType(accounts), skew)


def _account(index: int, entry: Any) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object")
    unknown = set(entry) - {"access_key", "secret_key", "admin", "topics", "groups",
                            "create_topics"}
    if unknown:
        raise ConfigError(f"{where} has unknown keys {sorted(unknown)}")
    access_key, secret_key = entry.get("access_key"), entry.get("secret_key")
    if not isinstance(access_key, str) or not _ACCESS_KEY.fullmatch(access_key):
        raise ConfigError(f"{where}.access_key must be 1..128 characters of [A-Za-z0-9_.@-]")
    if not isinstance(secret_key, str) or not secret_key:
        raise ConfigError(f"{where}.secret_key must be a non-empty string")
    admin, create = entry.get("admin", False), entry.get("create_topics", False)
    if type(admin) is not bool or type(create) is not bool:
        raise ConfigError(f"{where}.admin and .create_topics must be true or false")
    return Account(access_key, secret_key, admin,
                   _rights(f"{where}.topics", entry.get("topics", {})),
                   _rights(f"{where}.groups", entry.get("groups", {})), create)


def _rights(where: str, table: Any) -> dict[str, frozenset[str]]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be an object of name -> permission")
    rights = {}
    for name, permission in table.items():
        if permission not in _PERMISSIONS:
            raise ConfigError(f"{where}[{name!r}] must be one of {sorted(_PERMISSIONS)}, "
                              f"got {permission!r}")
        rights[name] = _PERMISSIONS[permission]
    return rights


__all__ = ["PUB", "SUB", "AclSettings", "Account", "load_acl_file", "parse_acl"]
