"""Store configuration: frozen, grouped dataclasses, validated on creation.

Defaults follow RocketMQ's ``MessageStoreConfig`` (reference Appendix A): 1 GiB commit-log
segments, 300 000 consume-queue units a file, 5 000 000 index slots and 20 000 000 index entries,
ASYNC flush. Every size can be made small for tests. ``StoreConfig.from_broker_conf`` builds a
config from RocketMQ's own ``broker.conf`` keys; keys it does not know are reported (logged and
kept in ``StoreConfig.unknown_broker_keys``), or rejected with ``strict=True``. Reading
broker.conf (its syntax, its keys, ``messageDelayLevel``) is ``broker_conf``'s job, which imports
nothing of this module.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .broker_conf import DEFAULT_DELAY_LEVELS, build_store_config, parse_delay_levels
from .errors import ConfigError

log = logging.getLogger(__name__)

MIB = 1 << 20
GIB = 1 << 30


class FlushMode(enum.Enum):
    """How appends become durable (RocketMQ ``flushDiskType``)."""

    SYNC = "SYNC_FLUSH"  # an append returns after a group flush covered it (or timed out)
    ASYNC = "ASYNC_FLUSH"  # an append returns at once; a periodic flush makes it durable


class BrokerRole(enum.Enum):
    """Replication role (RocketMQ ``brokerRole``; docs/replication.md).

    ASYNC_MASTER: puts return after local handling; connected slaves are fed best effort.
    SYNC_MASTER: a put also waits (``ha.slave_timeout_ms``) until a slave acknowledged it.
    SLAVE: copies the master's commit log over ``ha.master_address``; refuses producer writes.
    """

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True, kw_only=True)
class CommitLogConfig:
    """The commit log."""

    segment_size_bytes: int = GIB
    """Size of every commit-log segment file (``mappedFileSizeCommitLog``). Fixed once written:
    opening a store whose segments have another size fails."""
    max_message_size_bytes: int = 4 * MIB
    """Largest body accepted (``maxMessageSize``); larger bodies are rejected, nothing written."""
    check_crc_on_recover: bool = True
    """Verify body CRCs (and property CRCs where present) when recovery scans the log
    (``checkCRCOnRecover``)."""
    append_property_crc: bool = True
    """End every record's properties with RocketMQ 5's ``__CRC32#`` property, a CRC of the whole
    record, so recovery also catches a torn topic or properties (``enabledAppendPropCRC``;
    RocketMQ's default is false, which protects the body only). Costs 20 bytes a record."""

    def __post_init__(self) -> None:
        _require(self.segment_size_bytes >= 1024, "commit_log.segment_size_bytes",
                 "must be at least 1024")
        _require(self.max_message_size_bytes >= 1, "commit_log.max_message_size_bytes",
                 "must be positive")


@dataclass(frozen=True, kw_only=True)
class ConsumeQueueConfig:
    """Per (topic, queue) consume queues."""

    units_per_file: int = 300_000
    """20-byte units in one consume-queue file (``mappedFileSizeConsumeQueue`` / 20)."""
    open_files_max: int = 1000
    """Consume-queue files kept open (and mapped) at a time, least recently used closed first
    (``consumeQueueOpenFilesMax``, Postbox-only: RocketMQ keeps every file open). Each takes
    two descriptors and one mapping; at open the store lowers it to what the open-file limit
    allows, and logs what to raise. The number of queues is not limited by it."""

    def __post_init__(self) -> None:
        _require(self.units_per_file >= 2, "consume_queue.units_per_file", "must be at least 2")
        _require(self.open_files_max >= 8, "consume_queue.open_files_max", "must be at least 8")

    @property
    def file_size_bytes(self) -> int:
        """Size of one consume-queue file."""
        return self.units_per_file * 20


@dataclass(frozen=True, kw_only=True)
class KeyIndexConfig:
    """Hash index from message keys to log positions."""

    enabled: bool = True
    """Build the key index (``messageIndexEnable``); queries by key need it."""
    slot_count_max: int = 5_000_000
    """Hash slots per index file (``maxHashSlotNum``)."""
    entry_count_max: int = 20_000_000
    """Entries per index file (``maxIndexNum``); entry 0 is reserved, so one fewer fit."""

    def __post_init__(self) -> None:
        _require(self.slot_count_max >= 1, "key_index.slot_count_max", "must be positive")
        _require(self.entry_count_max >= 2, "key_index.entry_count_max", "must be at least 2")


@dataclass(frozen=True, kw_only=True)
class FlushConfig:
    """Durability. In ASYNC mode a crash of the machine (not the process) can lose what was
    written since the last flush, at most ``interval_ms`` plus ``least_pages`` pages of data."""

    mode: FlushMode = FlushMode.ASYNC
    interval_ms: int = 500
    """Commit-log flush period in ASYNC mode (``flushIntervalCommitLog``)."""
    least_pages: int = 4
    """Flush only when this many 4 KiB pages are dirty (``flushCommitLogLeastPages``)."""
    thorough_interval_ms: int = 10_000
    """Flush regardless of page count this often (``flushCommitLogThoroughInterval``)."""
    sync_timeout_ms: int = 5_000
    """SYNC mode: longest wait for the group flush (``syncFlushTimeout``)."""
    consume_queue_interval_ms: int = 1_000
    consume_queue_least_pages: int = 2
    consume_queue_thorough_interval_ms: int = 60_000

    def __post_init__(self) -> None:
        for name in ("interval_ms", "sync_timeout_ms", "consume_queue_interval_ms",
                     "thorough_interval_ms", "consume_queue_thorough_interval_ms"):
            _require(getattr(self, name) > 0, f"flush.{name}", "must be positive")
        _require(self.least_pages >= 0 and self.consume_queue_least_pages >= 0,
                 "flush.least_pages", "must not be negative")


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """Expired-file cleaning and disk watermarks (the retention service and the disk guard).

    Disk pressure means back-pressure: at the warning level writes are refused, and
    pressure deletes only segments every subscribed group has consumed past, unless
    ``clean_file_forcibly_enable`` says otherwise.
    """

    file_reserved_hours: int = 72
    """Segments older than this are expired (``fileReservedTime``) and deleted at the deletion
    hours, consumed or not: the time limit is the retention promise."""
    delete_when: str = "04"
    """Hours of the day (``HH``, ``;``-separated) when expired files are deleted."""
    disk_max_used_space_ratio: int = 75
    """Above this used percentage expired files are deleted outside the deletion hours too
    (``diskMaxUsedSpaceRatio``)."""
    disk_space_clean_forcibly_ratio: int = 85
    """Above this used percentage unexpired segments are deleted too: only those every
    subscribed group has consumed past, or any with ``clean_file_forcibly_enable``
    (``diskSpaceCleanForciblyRatio``)."""
    disk_space_warning_level_ratio: int = 90
    """At this used percentage new writes are refused with ``DiskFullError`` before the disk
    passes it (``diskSpaceWarningLevelRatio``); they resume once space is freed."""
    delete_file_batch_max: int = 10
    """Most commit-log segments deleted in one run (``deleteFileBatchMax``)."""
    clean_file_forcibly_enable: bool = False
    """Let disk pressure delete segments no group has consumed yet (``cleanFileForciblyEnable``,
    on by default in RocketMQ, off here). Consequence: above
    ``disk_space_clean_forcibly_ratio`` acknowledged messages that consumers have not read yet
    are deleted and lost to them; keep it off unless losing messages beats refusing writes."""
    disk_check_interval_ms: int = 100
    """Puts measure the disk at least this often (one ``statvfs``)."""
    disk_check_bytes: int = MIB
    """...and after this many bytes were accepted since the last measurement."""

    def __post_init__(self) -> None:
        _require(self.file_reserved_hours >= 0, "retention.file_reserved_hours", "must be >= 0")
        _require(re.fullmatch(r"\d{1,2}(;\d{1,2})*", self.delete_when) is not None,
                 "retention.delete_when", "must look like '04' or '04;16'")
        for name in ("disk_max_used_space_ratio", "disk_space_clean_forcibly_ratio",
                     "disk_space_warning_level_ratio"):
            _require(10 <= getattr(self, name) <= 95, f"retention.{name}", "must be in 10..95")
        _require(self.delete_file_batch_max >= 1, "retention.delete_file_batch_max",
                 "must be positive")
        _require(self.disk_check_interval_ms > 0 and self.disk_check_bytes > 0,
                 "retention.disk_check_interval_ms", "and disk_check_bytes must be positive")


@dataclass(frozen=True, kw_only=True)
class DelayConfig:
    """Delay levels for scheduled messages, and timers (delivery at any moment)."""

    levels_ms: tuple[int, ...] = field(default_factory=lambda: parse_delay_levels(
        DEFAULT_DELAY_LEVELS))
    timer_enabled: bool = True
    """Serve ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS``
    (``timerWheelEnable``); off: such a message is refused."""
    timer_max_delay_s: int = 259_200
    """Longest timer delay accepted (``timerMaxDelaySec``, 3 days)."""
    timer_precision_ms: int = 1000
    """Width of one timer-wheel slot (``timerPrecisionMs``: 100, 200, 500 or 1000). Postbox
    delivers at the exact millisecond; the slot is where the ``timerwheel`` file keeps it."""
    timer_roll_window_slots: int = 172_800
    """Slots ahead (``timerRollWindowSlot``, 2 days at 1 s) past which a timer is parked in the
    wheel and re-put to the timer topic when that window ends ("rolled")."""
    timer_log_segment_size_bytes: int = 100 * 1024 * 1024
    """Size of one ``timerlog/`` file (``mappedFileSizeTimerLog``); a store whose timer log
    has files of another size keeps theirs."""

    def __post_init__(self) -> None:
        _require(self.timer_max_delay_s > 0, "delay.timer_max_delay_s", "must be positive")
        _require(self.timer_precision_ms in (100, 200, 500, 1000), "delay.timer_precision_ms",
                 "must be 100, 200, 500 or 1000")
        _require(self.timer_roll_window_slots >= 2, "delay.timer_roll_window_slots",
                 "must be at least 2")
        _require(self.timer_log_segment_size_bytes >= 4096,
                 "delay.timer_log_segment_size_bytes", "must be at least 4096")


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    """Broker semantics over the store (``Broker``): topics, groups, offsets, long polling."""

    auto_create_topic: bool = True
    """Create a topic on its first send (``autoCreateTopicEnable``)."""
    default_topic_queue_count: int = 8
    """Queues of an auto-created topic (``defaultTopicQueueNums``)."""
    auto_create_subscription_group: bool = True
    """Create a subscription group on first use (``autoCreateSubscriptionGroup``)."""
    consumer_offset_persist_interval_ms: int = 5_000
    """How often committed offsets reach ``consumerOffset.json``
    (``flushConsumerOffsetInterval``)."""
    delay_offset_persist_interval_ms: int = 10_000
    """How often delay progress reaches ``delayOffset.json`` (``flushDelayOffsetInterval``)."""
    long_polling_max_ms: int = 15_000
    """Longest a pull may wait for a message (``BROKER_SUSPEND_MAX_TIME_MILLIS``)."""
    consumer_expiry_ms: int = 120_000
    """A consumer that sent no heartbeat for this long leaves its group."""
    queue_lock_expiry_ms: int = 60_000
    """An orderly consumer's queue lock lapses after this long without renewal."""
    topic_count_max: int = 10_000
    """Most topics the broker holds, retry (``%RETRY%g``) and dead-letter (``%DLQ%g``) topics
    included; creating one more raises ``TableFullError`` (Postbox-only broker.conf key
    ``topicCountMax``). Bounds ``topics.json`` and the files a topic's queues take."""
    subscription_group_count_max: int = 10_000
    """Most subscription groups (Postbox-only broker.conf key ``subscriptionGroupCountMax``)."""
    topic_queue_count_max: int = 1024
    """Most queues a topic may have (Postbox-only broker.conf key ``topicQueueCountMax``);
    also capped by ``StoreConfig.queue_id_max`` + 1."""
    transaction_timeout_ms: int = 6_000
    """A half message is first checked this long after it was born (``transactionTimeOut``;
    its ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property may ask for longer)."""
    transaction_check_max: int = 15
    """Checks of one half message before it is discarded to ``TRANS_CHECK_MAX_TIME_TOPIC``
    (``transactionCheckMax``)."""
    transaction_check_interval_ms: int = 30_000
    """Time between two checks of one half message (``transactionCheckInterval``)."""
    transaction_op_batch_interval_ms: int = 100
    """Commits' op records are gathered this long into one (``transactionOpBatchInterval``;
    Apache's default is 3 000): fewer writes per commit. Commits whose gathered record a crash
    lost are found by the recovery through the key index (a lookup per pending half)."""

    def __post_init__(self) -> None:
        _require(1 <= self.default_topic_queue_count <= 1024,
                 "broker.default_topic_queue_count", "must be in 1..1024")
        for name in ("topic_count_max", "subscription_group_count_max", "topic_queue_count_max",
                     "transaction_check_max"):
            _require(getattr(self, name) >= 1, f"broker.{name}", "must be positive")
        for name in ("consumer_offset_persist_interval_ms", "delay_offset_persist_interval_ms",
                     "long_polling_max_ms", "consumer_expiry_ms", "queue_lock_expiry_ms",
                     "transaction_timeout_ms", "transaction_check_interval_ms",
                     "transaction_op_batch_interval_ms"):
            _require(getattr(self, name) > 0, f"broker.{name}", "must be positive")


@dataclass(frozen=True, kw_only=True)
class HAConfig:
    """Master/slave replication of the commit log (reference §14; docs/replication.md).

    Off by default: without ``ha_listen`` a master opens no port, and without
    ``master_address`` a slave replicates nothing (it still serves reads).
    """

    ha_listen: str | None = None
    """Master: ``host:port`` the HA service listens on (``haListenPort``, RocketMQ 10912);
    port 0 binds any free port (``MessageStore.ha_listen_address`` tells which). Ignored on a
    slave, so a slave's config can carry the address it will use once promoted."""
    master_address: str | None = None
    """Slave: the master's HA ``host:port`` (``haMasterAddress``)."""
    heartbeat_interval_ms: int = 5_000
    """The slave reports its position at least this often, and the master sends an empty
    frame after this long without data (``haSendHeartbeatInterval``)."""
    housekeeping_interval_ms: int = 20_000
    """Either side closes a connection silent for this long (``haHousekeepingInterval``)."""
    transfer_batch_bytes: int = 32 * 1024
    """Largest frame body the master sends (``haTransferBatchSize``)."""
    slave_timeout_ms: int = 3_000
    """SYNC_MASTER: longest a put waits for a slave's acknowledgement (``slaveTimeout``)."""
    slave_fall_behind_max_bytes: int = 256 * MIB
    """SYNC_MASTER: a slave further behind than this is not waited for: puts return
    ``SLAVE_NOT_AVAILABLE`` at once (``haSlaveFallbehindMax``)."""

    def __post_init__(self) -> None:
        if self.ha_listen is not None:
            _parse_host_port(self.ha_listen, "ha.ha_listen")
        if self.master_address is not None:
            _parse_host_port(self.master_address, "ha.master_address")
        for name in ("heartbeat_interval_ms", "housekeeping_interval_ms",
                     "transfer_batch_bytes", "slave_timeout_ms",
                     "slave_fall_behind_max_bytes"):
            _require(getattr(self, name) > 0, f"ha.{name}", "must be positive")
        _require(self.housekeeping_interval_ms > self.heartbeat_interval_ms,
                 "ha.housekeeping_interval_ms", "must be longer than ha.heartbeat_interval_ms")

    @property
    def listen_address(self) -> tuple[str, int] | None:
        """``ha_listen`` split into (host, port), or None."""
        return None if self.ha_listen is None else _parse_host_port(self.ha_listen)

    @property
    def master_host_port(self) -> tuple[str, int] | None:
        """``master_address`` split into (host, port), or None."""
        return (None if self.master_address is None
                else _parse_host_port(self.master_address))


@dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """Everything the store needs; pass it to ``MessageStore.open``."""

    root_dir: Path
    commit_log: CommitLogConfig = field(default_factory=CommitLogConfig)
    consume_queue: ConsumeQueueConfig = field(default_factory=ConsumeQueueConfig)
    key_index: KeyIndexConfig = field(default_factory=KeyIndexConfig)
    flush: FlushConfig = field(default_factory=FlushConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    delay: DelayConfig = field(default_factory=DelayConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    ha: HAConfig = field(default_factory=HAConfig)
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    """Replication role; SLAVE refuses producer writes and replicates from
    ``ha.master_address``."""
    store_host: str = "127.0.0.1:10911"
    """Address written into every record's STOREHOST field and into offsetMsgIds."""
    queue_id_max: int = 1023
    """Largest queue id accepted by ``put_message`` (RocketMQ brokers allow up to a topic's
    write-queue count; 1024 queues is far above any realistic topic)."""
    unknown_broker_keys: tuple[str, ...] = ()
    """broker.conf keys ``from_broker_conf`` did not recognise (reported, not applied)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root_dir", Path(self.root_dir))
        _parse_host_port(self.store_host)
        _require(0 <= self.queue_id_max < 1 << 31, "queue_id_max", "must be in 0..2**31-1")

    @property
    def store_host_address(self) -> tuple[str, int]:
        """``store_host`` split into (ip, port)."""
        return _parse_host_port(self.store_host)

    @classmethod
    def from_broker_conf(cls, source: str | os.PathLike[str] | Mapping[str, str], *,
                         strict: bool = False, **overrides: Any) -> StoreConfig:
        """Build a config from RocketMQ ``broker.conf`` keys (a file path or a mapping).

        Args:
            source: path of a Java-properties file, or a mapping of broker.conf keys to values.
            strict: raise ``ConfigError`` on unknown keys instead of reporting them.
            overrides: StoreConfig fields that win over the file (e.g. ``root_dir``).
        """
        config: StoreConfig = build_store_config(cls, source, strict=strict, overrides=overrides)
        return config

    def replace(self, **changes: Any) -> StoreConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def _parse_host_port(text: str, name: str = "store_host") -> tuple[str, int]:
    host, separator, port = str(text).rpartition(":")
    host = host.strip("[]")
    if not separator or not port.isdigit() or not host or int(port) > 65535:
        raise ConfigError(f"{name} {text!r} must look like 10.0.0.1:10911")
    return host, int(port)


def _require(condition: bool, name: str, why: str) -> None:
    if not condition:
        raise ConfigError(f"{name} {why}")
