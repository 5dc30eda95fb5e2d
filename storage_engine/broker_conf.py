"""Read RocketMQ ``broker.conf`` (Java properties) into a ``StoreConfig``.

Keys that map onto the store are applied; keys that belong to a RocketMQ broker but have no
meaning for an embedded store (cluster and name-server settings) are accepted silently; anything
else is reported in ``StoreConfig.unknown_broker_keys`` and logged, or rejected when strict.

This module knows broker.conf (the properties syntax, the keys, ``messageDelayLevel``) and
imports nothing of ``config``: ``StoreConfig.from_broker_conf`` passes its class in, and a key
whose value names an enum member (``flushDiskType``, ``brokerRole``) is converted by the type
of the field it sets, which the config module owns. Pure functions; no state.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from .errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """Parse RocketMQ's ``messageDelayLevel`` (``"1s 5s ... 2h"``; ``ms`` also accepted)."""
    levels = []
    for token in text.split():
        match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", token)
        if match is None:
            raise ConfigError(f"delay level {token!r} in messageDelayLevel is not like 5s/1m/2h")
        levels.append(int(match.group(1)) * _DURATION_UNITS_MS[match.group(2)])
    if not levels:
        raise ConfigError("messageDelayLevel defines no levels")
    return tuple(levels)


# broker.conf key → (group, field, converter). group None = a top-level StoreConfig field.
_Converter = Callable[[str], object]
_ENUM_MEMBER = "enum member"
"""Converter marker: the text is the value of a member of the field's enum type."""


def _integer(text: str) -> int:
    return int(text.strip())


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true/false")
    return value == "true"


def _cq_units(text: str) -> int:
    size = int(text.strip())
    return -(-size // 20)  # RocketMQ rounds the file size up to a multiple of 20


_MAPPING: dict[str, tuple[str | None, str, _Converter | str]] = {
    "storePathRootDir": (None, "root_dir", lambda text: Path(text.strip())),
    "mappedFileSizeCommitLog": ("commit_log", "segment_size_bytes", _integer),
    "maxMessageSize": ("commit_log", "max_message_size_bytes", _integer),
    "checkCRCOnRecover": ("commit_log", "check_crc_on_recover", _boolean),
    "enabledAppendPropCRC": ("commit_log", "append_property_crc", _boolean),
    "mappedFileSizeConsumeQueue": ("consume_queue", "units_per_file", _cq_units),
    "consumeQueueOpenFilesMax": ("consume_queue", "open_files_max", _integer),  # Postbox-only
    "messageIndexEnable": ("key_index", "enabled", _boolean),
    "maxHashSlotNum": ("key_index", "slot_count_max", _integer),
    "maxIndexNum": ("key_index", "entry_count_max", _integer),
    "flushDiskType": ("flush", "mode", _ENUM_MEMBER),
    "flushIntervalCommitLog": ("flush", "interval_ms", _integer),
    "flushCommitLogLeastPages": ("flush", "least_pages", _integer),
    "flushCommitLogThoroughInterval": ("flush", "thorough_interval_ms", _integer),
    "syncFlushTimeout": ("flush", "sync_timeout_ms", _integer),
    "flushIntervalConsumeQueue": ("flush", "consume_queue_interval_ms", _integer),
    "flushConsumeQueueLeastPages": ("flush", "consume_queue_least_pages", _integer),
    "flushConsumeQueueThoroughInterval": ("flush", "consume_queue_thorough_interval_ms",
                                          _integer),
    "fileReservedTime": ("retention", "file_reserved_hours", _integer),
    "deleteWhen": ("retention", "delete_when", str.strip),
    "diskMaxUsedSpaceRatio": ("retention", "disk_max_used_space_ratio", _integer),
    "diskSpaceCleanForciblyRatio": ("retention", "disk_space_clean_forcibly_ratio", _integer),
    "diskSpaceWarningLevelRatio": ("retention", "disk_space_warning_level_ratio", _integer),
    "deleteFileBatchMax": ("retention", "delete_file_batch_max", _integer),
    "cleanFileForciblyEnable": ("retention", "clean_file_forcibly_enable", _boolean),
    "messageDelayLevel": ("delay", "levels_ms", parse_delay_levels),
    "timerWheelEnable": ("delay", "timer_enabled", _boolean),
    "timerMaxDelaySec": ("delay", "timer_max_delay_s", _integer),
    "timerPrecisionMs": ("delay", "timer_precision_ms", _integer),
    "timerRollWindowSlot": ("delay", "timer_roll_window_slots", _integer),
    "mappedFileSizeTimerLog": ("delay", "timer_log_segment_size_bytes", _integer),
    "autoCreateTopicEnable": ("broker", "auto_create_topic", _boolean),
    "defaultTopicQueueNums": ("broker", "default_topic_queue_count", _integer),
    "autoCreateSubscriptionGroup": ("broker", "auto_create_subscription_group", _boolean),
    "flushConsumerOffsetInterval": ("broker", "consumer_offset_persist_interval_ms", _integer),
    "flushDelayOffsetInterval": ("broker", "delay_offset_persist_interval_ms", _integer),
    "topicCountMax": ("broker", "topic_count_max", _integer),  # Postbox-only
    "subscriptionGroupCountMax": ("broker", "subscription_group_count_max", _integer),  # Postbox
    "topicQueueCountMax": ("broker", "topic_queue_count_max", _integer),  # Postbox-only
    "transactionTimeOut": ("broker", "transaction_timeout_ms", _integer),
    "transactionCheckMax": ("broker", "transaction_check_max", _integer),
    "transactionCheckInterval": ("broker", "transaction_check_interval_ms", _integer),
    "transactionOpBatchInterval": ("broker", "transaction_op_batch_interval_ms", _integer),
    "brokerRole": (None, "broker_role", _ENUM_MEMBER),
    "haListenPort": ("ha", "ha_listen", lambda text: f"0.0.0.0:{_integer(text)}"),
    "haMasterAddress": ("ha", "master_address", str.strip),
    "haSendHeartbeatInterval": ("ha", "heartbeat_interval_ms", _integer),
    "haHousekeepingInterval": ("ha", "housekeeping_interval_ms", _integer),
    "haTransferBatchSize": ("ha", "transfer_batch_bytes", _integer),
    "haSlaveFallbehindMax": ("ha", "slave_fall_behind_max_bytes", _integer),
    "slaveTimeout": ("ha", "slave_timeout_ms", _integer),
}

# Broker keys that configure parts of a RocketMQ deployment an embedded store does not have.
_BROKER_ONLY_KEYS = frozenset({
    "brokerClusterName", "brokerName", "brokerId", "namesrvAddr", "brokerPermission", "listenPort",
    "brokerIP1", "brokerIP2", "storePathCommitLog", "storePathConsumeQueue",
    "storePathIndex", "storeCheckpoint", "abortFile", "sendMessageThreadPoolNums",
    "pullMessageThreadPoolNums", "aclEnable", "enablePropertyFilter", "traceTopicEnable",
    "slaveReadEnable", "transientStorePoolEnable", "useReentrantLockWhenPutMessage",
    # the remoting listeners' bounds (read by the CLI into ServerLimits)
    "remotingMaxConnections", "remotingMaxConnectionsPerPeer", "remotingReservedConnections",
    "remotingFrameReadTimeoutMillis", "remotingMaxOutputBytes", "remotingMaxOwedAnswers",
    "remotingIdleTimeoutMillis", "remotingProbationTimeoutMillis",
})


def parse_properties(text: str) -> dict[str, str]:
    """Parse the Java ``.properties`` syntax used by broker.conf (comments, ``=``/``:``, ``\\``)."""
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        for index, char in enumerate(line):
            if char in "=:" or char.isspace():
                key, value = line[:index], line[index + 1:].lstrip(" \t=:")
                break
        else:
            key, value = line, ""
        result[key.strip()] = value.strip()
    return result


def build_store_config(cls, source, *, strict: bool, overrides: Mapping[str, object]):
    """Build ``cls`` (a ``StoreConfig``) from broker.conf keys plus explicit overrides."""
    if isinstance(source, Mapping):
        entries = {str(key): str(value) for key, value in source.items()}
    else:
        entries = parse_properties(Path(os.fspath(source)).read_text(encoding="utf-8"))
    groups: dict[str, dict[str, object]] = {}
    top: dict[str, object] = {}
    unknown = []
    for key, value in entries.items():
        if key in _MAPPING:
            group, name, convert = _MAPPING[key]
            try:
                converted = (convert(value) if callable(convert)
                             else _enum_member(cls, group, name, value))
            except (ValueError, ConfigError) as error:
                raise ConfigError(f"broker.conf {key}={value!r}: {error}") from error
            (top if group is None else groups.setdefault(group, {}))[name] = converted
        elif key not in _BROKER_ONLY_KEYS:
            unknown.append(key)
    if unknown and strict:
        raise ConfigError(f"unknown broker.conf keys: {', '.join(sorted(unknown))}")
    if unknown:
        log.warning("[config] broker.conf keys not understood by the store: %s",
                    ", ".join(sorted(unknown)))
    return _assemble(cls, groups, top, tuple(sorted(unknown)), dict(overrides))


def _enum_member(cls, group: str | None, name: str, text: str) -> enum.Enum:
    """``text`` as a member of the enum type of field ``name`` (of ``cls``, or of its
    ``group``), that type read from the field's default."""
    owner = cls if group is None else _fields(cls)[group].default_factory
    enum_type: type[enum.Enum] = type(_fields(owner)[name].default)
    return enum_type(text.strip())


def _fields(owner) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(owner)}


def _assemble(cls, groups, top, unknown, overrides):
    defaults = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, object] = {}
    for group, values in groups.items():
        group_type = defaults[group].default_factory
        assert callable(group_type)  # every group field has a default_factory
        kwargs[group] = group_type(**values)
    kwargs.update(top)
    kwargs.update(overrides)
    if "root_dir" not in kwargs:
        raise ConfigError("broker.conf has no storePathRootDir and no root_dir was given")
    return cls(unknown_broker_keys=unknown, **kwargs)
