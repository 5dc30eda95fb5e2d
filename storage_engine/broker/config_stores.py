"""Typed tables over the broker config files in ``{root}/config/`` (reference §9.2).

``consumerOffset.json`` (``ConsumerOffsetTable``), ``delayOffset.json`` (``DelayOffsetTable``),
``topics.json`` (``TopicConfigTable``), ``subscriptionGroup.json`` (``SubscriptionGroupTable``)
and ``consumerFilter.json`` (``ConsumerFilterTable``); ``ConfigStores`` holds all five. Each
table is loaded once at startup (``load``) and written whole by ``persist`` (which only writes).
The beans live in ``config_beans``, the file handling (``.bak``, atomic replace) in
``config_file``, the JSON dialect in ``formats.fastjson``.

Invariants:

* Nothing a broker wrote is dropped: a table keeps the document it loaded and replaces only the
  values it owns; beans (``TopicConfig``, ``SubscriptionGroupConfig``) carry unknown fields in
  ``extra``; ``dataVersion`` keeps fields such as 5.x ``stateVersion``.
* Map entries keep the order they were loaded in and new entries are appended, and beans are
  written with their fields sorted (fastjson's default), so persisting an unchanged table
  reproduces the loaded file byte for byte.
* Names are validated when added (``validate_topic``; a group must make a valid ``%RETRY%``
  topic, which also keeps ``@`` out of ``topic@group`` keys). Odd names in a loaded file are
  logged and kept, never rejected.
* Every change to ``topics.json`` or ``subscriptionGroup.json`` increments ``dataVersion.counter``
  and sets ``dataVersion.timestamp`` from the injected clock.

Thread-safety: each table guards its state with its own lock, so consumers may commit offsets from
many threads. ``persist`` encodes a snapshot under that lock and writes it outside the lock;
persists of one table are serialized, so a later persist never writes an older snapshot.

Cost: every change bumps the table's in-memory version; ``persist`` writes only when the version
moved since the file was loaded or last written (so concurrent creators share one write, and a
store on a full disk closes without rewriting unchanged files), and bean tables encode each bean
once and reuse the text (``EncodedJson``) until it changes, so creating the n-th topic no longer
re-encodes the n - 1 before it (what made creation slow down as topics grew).

Crash behaviour: tables live in memory and reach disk through ``ConfigFile`` (atomic replace,
``.bak`` = previous version). A crash loses the changes made since the last persist; as in
RocketMQ (consumer offsets persist every 5 s) consumers then re-read a few messages.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from ..clock import Clock, SystemClock
from ..contract.config_beans import (
    DataVersion,
    SubscriptionGroupConfig,
    TopicConfig,
    bean_from_json,
    bean_to_json,
    validate_group,
)
from ..contract.topics import validate_topic
from ..errors import InvalidMessageError, InvalidQueueError, InvalidTopicError
from ..formats.directory import CONFIG_DIR_NAME, CONSUMER_OFFSET_FILE_NAME, TOPIC_GROUP_SEPARATOR
from ..formats.fastjson import EncodedJson, encode_config_json, encode_json_value
from .config_file import ConfigFile, ConfigFileError

log = logging.getLogger(__name__)

__all__ = [
    "CONFIG_DIR_NAME", "ConfigFileError", "ConfigStores", "ConsumerFilterTable",
    "ConsumerOffsetTable", "DataVersion", "DelayOffsetTable", "SubscriptionGroupConfig",
    "SubscriptionGroupTable", "TopicConfig", "TopicConfigTable", "validate_group",
]

# --------------------------------------------------------------------------------------------
# Shared table machinery
# --------------------------------------------------------------------------------------------

class _ConfigTable:
    """One config file held in memory: the loaded document, a lock, load and persist."""

    FILE_NAME: ClassVar[str]

    def __init__(self, config_dir: str | Path, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._file = ConfigFile(Path(config_dir) / self.FILE_NAME, clock=self._clock)
        self._lock = threading.RLock()
        self._persist_lock = threading.Lock()
        self._document: dict[str, Any] = self._new_document()
        self._version = 0  # bumped by every change (``_changed``)
        self._persisted_version = -1  # the version the file holds; -1: unknown, write it
        self.persist_count = 0
        """Files written by ``persist`` (skipped persists of an unchanged table not counted)."""

    @property
    def path(self) -> Path:
        """The main file."""
        return self._file.path

    def load(self) -> None:
        """Replace the in-memory table with the file (or its ``.bak``; empty when neither).

        Raises:
            ConfigFileError: neither the file nor its ``.bak`` can be used.
        """
        document = self._file.load(self._parse)
        with self._lock:
            self._document = self._new_document() if document is None else document
            self._loaded()
            self._version += 1
            self._persisted_version = self._version if self._file.loaded_main else -1

    def persist(self, *, force: bool = False) -> bool:
        """Write the table to disk (atomic replace; the previous file becomes ``.bak``) unless
        the file already holds it (``force``: write anyway); True when a file was written."""
        with self._persist_lock:
            with self._lock:
                version = self._version
                if version == self._persisted_version and not force:
                    return False  # unchanged, or a concurrent persist already wrote it
                text = encode_config_json(self._snapshot())
            self._file.persist_text(text)
            self._persisted_version = version
            self.persist_count += 1
        return True

    def _changed(self) -> None:
        """Record a change (called under the lock by every mutation)."""
        self._version += 1

    def _loaded(self) -> None:
        """Hook: a new document was loaded (called under the lock)."""

    def _new_document(self) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, raw: Any) -> dict[str, Any]:
        """Check a decoded file and convert it to the in-memory form; ValueError if malformed."""
        raise NotImplementedError

    def _snapshot(self) -> dict[str, Any]:
        """The document to write (called under the lock)."""
        return self._document

    def _object_field(self, document: dict[str, Any], name: str) -> dict:
        """``document[name]`` as a dict, added empty when missing."""
        value = document.setdefault(name, {})
        if not isinstance(value, dict):
            raise ValueError(f"{self.FILE_NAME}: {name!r} is not an object")
        return value


def _require_object(raw: Any, file_name: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{file_name} does not hold a JSON object")
    return raw


def _int_map(raw: Any, what: str) -> dict[int, int]:
    """``{queueId|level: offset}``: int keys (or decimal strings, from strict JSON), int values."""
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is not an object")
    result: dict[int, int] = {}
    for key, value in raw.items():
        if isinstance(key, str) and key.lstrip("-").isdigit():
            key = int(key)
        if not isinstance(key, int) or not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{what} has a non-integer entry {key!r}: {value!r}")
        result[key] = value
    return result


def _check_non_negative(name: str, value: object, error: type[InvalidMessageError]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise error(f"{name} must be an integer >= 0, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# Offsets
# --------------------------------------------------------------------------------------------

class ConsumerOffsetTable(_ConfigTable):
    """``consumerOffset.json``: ``offsetTable`` {"topic@group": {queueId: nextOffset}}.

    The stored offset is the next one to consume ("consume from here").
    """

    FILE_NAME = CONSUMER_OFFSET_FILE_NAME

    def commit(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next offset ``group`` consumes from ``topic``/``queue_id``.

        Like RocketMQ, an offset lower than the stored one is accepted (a reset) and logged.
        """
        key = validate_topic(topic) + TOPIC_GROUP_SEPARATOR + validate_group(group)
        _check_non_negative("queue_id", queue_id, InvalidQueueError)
        _check_non_negative("offset", offset, InvalidMessageError)
        with self._lock:
            queues = self._table.setdefault(key, {})
            previous = queues.get(queue_id)
            queues[queue_id] = offset
            self._changed()
        if previous is not None and offset < previous:
            log.info("[config] consumer offset of %s queue=%d moved back from %d to %d", key,
                     queue_id, previous, offset)

    def query(self, topic: str, group: str, queue_id: int) -> int | None:
        """The committed next offset, or None when the group never committed on that queue."""
        with self._lock:
            return self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id)

    def offsets(self, topic: str, group: str) -> dict[int, int]:
        """A copy of ``{queue_id: next_offset}`` for ``topic@group`` (empty when unknown)."""
        with self._lock:
            return dict(self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}))

    def keys(self) -> list[str]:
        """Every ``topic@group`` key, in table order."""
        with self._lock:
            return list(self._table)

    def remove_group(self, group: str) -> int:
        """Drop every ``<topic>@<group>`` entry of ``group``; return how many were dropped."""
        return self._remove_where(lambda parts: parts[1] == group)

    def clean_topic(self, topic: str) -> int:
        """Drop every ``<topic>@<group>`` entry whose topic is exactly ``topic``; return the count.

        As RocketMQ's ``cleanOffsetByTopic``: keys are split on ``@`` and only two-part keys
        whose topic part equals ``topic`` match (``TopicTest`` does not match ``Topic``).
        """
        return self._remove_where(lambda parts: parts[0] == topic)

    def _remove_where(self, matches: Callable[[list[str]], bool]) -> int:
        with self._lock:
            doomed = [key for key in self._table
                      if len(parts := key.split(TOPIC_GROUP_SEPARATOR)) == 2 and matches(parts)]
            for key in doomed:
                log.info("[config] removed consumer offsets %s %s", key, self._table.pop(key))
            if doomed:
                self._changed()
        return len(doomed)

    @property
    def _table(self) -> dict[str, dict[int, int]]:
        return self._document["offsetTable"]

    def _new_document(self) -> dict[str, Any]:
        return {"offsetTable": {}}

    def _parse(self, raw: Any) -> dict[str, Any]:
        document = _require_object(raw, self.FILE_NAME)
        table = self._object_field(document, "offsetTable")
        parsed: dict[str, dict[int, int]] = {}
        for key, queues in table.items():
            if not isinstance(key, str):
                raise ValueError(f"{self.FILE_NAME}: offsetTable key {key!r} is not a string")
            parsed[key] = _int_map(queues, f"{self.FILE_NAME}: offsetTable[{key!r}]")
            _check_loaded_key(self.FILE_NAME, key)
        document["offsetTable"] = parsed
        return document


def _check_loaded_key(file_name: str, key: str) -> None:
    """Log (never reject) a loaded ``topic@group`` key that Postbox would not have written."""
    topic, separator, _ = key.partition(TOPIC_GROUP_SEPARATOR)
    try:
        if not separator:
            raise InvalidTopicError("no '@' between topic and group")
        validate_topic(topic)
    except InvalidTopicError as error:
        log.warning("[config] %s: key %r is not a valid topic@group (%s); kept as loaded",
                    file_name, key, error)


class DelayOffsetTable(_ConfigTable):
    """``delayOffset.json``: ``offsetTable`` {delayLevel: next consume-queue offset of
    ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``}."""

    FILE_NAME = "delayOffset.json"

    def get(self, level: int) -> int | None:
        """The next offset to deliver for ``level``, or None when never set."""
        with self._lock:
            return self._table.get(level)

    def set(self, level: int, offset: int) -> None:
        """Record the next offset to deliver for ``level`` (>= 1)."""
        if not isinstance(level, int) or isinstance(level, bool) or level < 1:
            raise InvalidMessageError(f"delay level must be an integer >= 1, got {level!r}")
        _check_non_negative("offset", offset, InvalidMessageError)
        with self._lock:
            self._table[level] = offset
            self._changed()

    def levels(self) -> dict[int, int]:
        """A copy of ``{level: next_offset}``."""
        with self._lock:
            return dict(self._table)

    @property
    def _table(self) -> dict[int, int]:
        return self._document["offsetTable"]

    def _new_document(self) -> dict[str, Any]:
        return {"offsetTable": {}}

    def _parse(self, raw: Any) -> dict[str, Any]:
        document = _require_object(raw, self.FILE_NAME)
        table = self._object_field(document, "offsetTable")
        document["offsetTable"] = _int_map(table, f"{self.FILE_NAME}: offsetTable")
        return document


# --------------------------------------------------------------------------------------------
# Versioned bean tables: topics, subscription groups
# --------------------------------------------------------------------------------------------

BeanT = TypeVar("BeanT")


class _BeanTable(_ConfigTable, Generic[BeanT]):
    """``{"dataVersion": {...}, TABLE_FIELD: {name: bean}}``; beans held as dataclasses."""

    TABLE_FIELD: ClassVar[str]
    BEAN: ClassVar[type]
    NAME_ATTRIBUTE: ClassVar[str]

    def __init__(self, config_dir: str | Path, *, clock: Clock | None = None) -> None:
        self._encoded: dict[str, str] = {}  # bean name -> its entry's text, until it changes
        self.encoded_bean_count = 0
        """Beans encoded by persists (each once until it changes: creation cost stays flat)."""
        super().__init__(config_dir, clock=clock)

    def __len__(self) -> int:
        with self._lock:
            return len(self._beans)

    @property
    def data_version(self) -> DataVersion:
        """The current ``dataVersion``."""
        with self._lock:
            version = self._document["dataVersion"]
            return DataVersion(version["counter"], version["timestamp"])

    def names(self) -> list[str]:
        """Every entry name, in table order."""
        with self._lock:
            return list(self._beans)

    def get(self, name: str) -> BeanT | None:
        """The named entry's config, or None."""
        with self._lock:
            value: BeanT | None = self._beans.get(name)
            return value

    def put(self, bean: BeanT) -> bool:
        """Add or replace an entry (name validated); False when it was already exactly so."""
        name = getattr(bean, self.NAME_ATTRIBUTE)
        type(self).validate_name(name)
        with self._lock:
            if self._beans.get(name) == bean:
                return False
            self._beans[name] = bean
            self._bump(name)
        return True

    def remove(self, name: str) -> bool:
        """Drop the entry; False when there was none."""
        with self._lock:
            if self._beans.pop(name, None) is None:
                return False
            self._bump(name)
        return True

    def _bump(self, name: str) -> None:
        self._encoded.pop(name, None)
        self._changed()
        version = self._document["dataVersion"]
        version["counter"] += 1
        version["timestamp"] = self._clock.now_ms()

    @property
    def _beans(self) -> dict[str, Any]:
        return self._document[self.TABLE_FIELD]

    def _new_document(self) -> dict[str, Any]:
        return {"dataVersion": {"counter": 0, "timestamp": self._clock.now_ms()},
                self.TABLE_FIELD: {}}

    def _parse(self, raw: Any) -> dict[str, Any]:
        document = _require_object(raw, self.FILE_NAME)
        version = self._object_field(document, "dataVersion")
        for name in ("counter", "timestamp"):
            value = version.setdefault(name, 0)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{self.FILE_NAME}: dataVersion.{name} is not an integer")
        beans: dict[str, Any] = {}
        for name, raw_bean in self._object_field(document, self.TABLE_FIELD).items():
            if not isinstance(name, str):
                raise ValueError(f"{self.FILE_NAME}: {self.TABLE_FIELD} key {name!r} is not a "
                                 "string")
            beans[name] = bean_from_json(self.BEAN, raw_bean, self.NAME_ATTRIBUTE, name)
            self._check_loaded_name(name)
        document[self.TABLE_FIELD] = beans
        return document

    validate_name: ClassVar[staticmethod[[str], object]]
    """Raise an ``InvalidMessageError`` for an entry name this table must not add."""

    def _check_loaded_name(self, name: str) -> None:
        try:
            type(self).validate_name(name)
        except InvalidMessageError as error:
            log.warning("[config] %s: %r is not a valid name (%s); kept as loaded",
                        self.FILE_NAME, name, error)

    def _loaded(self) -> None:
        self._encoded = {}

    def _snapshot(self) -> dict[str, Any]:
        """The document with the table as one ``EncodedJson``: the text of each entry
        (``"name":{bean}`` as ``encode_config_json`` writes it at indent 2) is kept until the
        bean changes, so a persist joins strings instead of encoding every bean again."""
        snapshot = dict(self._document)
        encoded = self._encoded
        entries = []
        for name, bean in self._beans.items():
            text = encoded.get(name)
            if text is None:
                bean_text = encode_json_value(bean_to_json(bean), 2, 2).text
                key_text = encode_json_value(name, 2, 2).text
                text = encoded[name] = "\n\t\t" + key_text + ":" + bean_text
                self.encoded_bean_count += 1
            entries.append(text)
        table = "{" + ",".join(entries) + "\n\t}" if entries else "{}"
        snapshot[self.TABLE_FIELD] = EncodedJson(table, 1, 1)
        return snapshot


class TopicConfigTable(_BeanTable[TopicConfig]):
    """``topics.json``: ``topicConfigTable`` {topic: TopicConfig} with a ``dataVersion``."""

    FILE_NAME = "topics.json"
    TABLE_FIELD = "topicConfigTable"
    BEAN = TopicConfig
    NAME_ATTRIBUTE = "topic_name"
    validate_name = staticmethod(validate_topic)


class SubscriptionGroupTable(_BeanTable[SubscriptionGroupConfig]):
    """``subscriptionGroup.json``: ``subscriptionGroupTable`` {group: SubscriptionGroupConfig}
    with a ``dataVersion``."""

    FILE_NAME = "subscriptionGroup.json"
    TABLE_FIELD = "subscriptionGroupTable"
    BEAN = SubscriptionGroupConfig
    NAME_ATTRIBUTE = "group_name"
    validate_name = staticmethod(validate_group)


# --------------------------------------------------------------------------------------------
# Consumer filters, and all five together
# --------------------------------------------------------------------------------------------

class ConsumerFilterTable(_ConfigTable):
    """``consumerFilter.json``: ``filterDataByTopic``, kept exactly as loaded.

    Postbox evaluates no SQL92/bloom filters, so the table is carried, not interpreted (a Java
    broker also purges entries dead for > 24 h at persist; Postbox does not).
    """

    FILE_NAME = "consumerFilter.json"

    def topics(self) -> list[str]:
        """Topics with filter data, in table order."""
        with self._lock:
            return list(self._document["filterDataByTopic"])

    def get(self, topic: str) -> dict[str, Any] | None:
        """A deep copy of the topic's filter data, or None."""
        with self._lock:
            data = self._document["filterDataByTopic"].get(topic)
            return copy.deepcopy(data)

    def _new_document(self) -> dict[str, Any]:
        return {"filterDataByTopic": {}}

    def _parse(self, raw: Any) -> dict[str, Any]:
        document = _require_object(raw, self.FILE_NAME)
        self._object_field(document, "filterDataByTopic")
        return document


class ConfigStores:
    """The five config tables of one store's ``config`` directory (the broker owns them)."""

    @classmethod
    def open(cls, root_dir: str | Path, clock: Clock | None = None) -> ConfigStores:
        """The tables of the store at ``root_dir``, loaded (``load_all``).

        For tools that read or edit the tables of a store no broker runs on; the process must
        hold the store (its ``lock`` file) or know that no broker runs there.
        """
        stores = cls(Path(root_dir) / CONFIG_DIR_NAME, clock)
        stores.load_all()
        return stores

    def __init__(self, config_dir: str | Path, clock: Clock | None = None) -> None:
        self.config_dir = Path(config_dir)
        self.consumer_offsets = ConsumerOffsetTable(self.config_dir, clock=clock)
        self.delay_offsets = DelayOffsetTable(self.config_dir, clock=clock)
        self.topics = TopicConfigTable(self.config_dir, clock=clock)
        self.subscription_groups = SubscriptionGroupTable(self.config_dir, clock=clock)
        self.consumer_filters = ConsumerFilterTable(self.config_dir, clock=clock)

    def tables(self) -> tuple[_ConfigTable, ...]:
        """All five, in load/persist order."""
        return (self.topics, self.subscription_groups, self.consumer_offsets,
                self.delay_offsets, self.consumer_filters)

    def load_all(self) -> None:
        """Load every table (startup). Raises ``ConfigFileError`` on the first unusable file."""
        for table in self.tables():
            table.load()

    def persist_all(self) -> None:
        """Persist every table (shutdown, or an explicit checkpoint of all config)."""
        for table in self.tables():
            table.persist()
