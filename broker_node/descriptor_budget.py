"""Fitting the remoting listeners' connection caps to the open-file limit (``RLIMIT_NOFILE``).

Each accepted connection holds a descriptor, and so does every file the store opens. A listener
allowed more connections than the limit leaves would let a flood of sockets take the
descriptors the store needs for its checkpoint, its configuration files, a new commit-log
segment or a consume-queue file. So ``BrokerNode`` fits ``ServerLimits.max_connections`` (the
same for each listener: broker and name server) to what the limit leaves once the store has its
budget:

- the descriptors in use now (the store open: its commit-log segments and key-index files);
- the consume-queue files it may still open (``consume_queue.open_files_max``, itself fitted
  to the limit at open: ``storage_engine.store.open_files``), two descriptors each;
- ``GROWTH_FILES`` more mapped files (new commit-log segments and key-index files);
- a margin (``limit // 16``, at least ``MARGIN_MIN``) for the short-lived ones: checkpoint and
  configuration writes, log files, gRPC connections, an accepted connection being refused.

The rest is shared by the listeners (never under ``CONNECTIONS_MIN`` each); the reserved slots
shrink in proportion. One ``[limits]`` warning says what was chosen and what to raise; with the
usual limits (524 288 or more) nothing changes.
"""

from __future__ import annotations

import dataclasses
import logging

from postbox.storage_engine.broker import Broker
from postbox.storage_engine.store.open_files import (
    DESCRIPTORS_PER_FILE,
    descriptor_limit,
    descriptors_in_use,
)

from .server import ServerLimits

log = logging.getLogger(__name__)

GROWTH_FILES = 4
MARGIN_MIN = 32
CONNECTIONS_MIN = 16


def connection_budget(broker: Broker) -> int | None:
    """Descriptors the remoting connections may hold in all (None: no limit)."""
    limit = descriptor_limit()
    if limit is None:
        return None
    files = broker.store.open_files
    queue_room = max(0, files.files_max - files.open_count) * DESCRIPTORS_PER_FILE
    margin = max(MARGIN_MIN, limit // 16)
    return (limit - descriptors_in_use() - queue_room - GROWTH_FILES * DESCRIPTORS_PER_FILE
            - margin)


def fit_connection_limits(broker: Broker, limits: ServerLimits, listeners: int
                          ) -> ServerLimits:
    """``limits`` with ``max_connections`` (and ``reserved_connections``) lowered so that
    ``listeners`` listeners at their cap fit the descriptors left (``connection_budget``)."""
    budget = connection_budget(broker)
    if budget is None or limits.max_connections * listeners <= budget:
        return limits
    fitted = max(CONNECTIONS_MIN, budget // listeners)
    if fitted >= limits.max_connections:
        return limits
    reserved = min(fitted - 1, limits.reserved_connections * fitted // limits.max_connections)
    log.warning(
        "[limits] open-file limit (RLIMIT_NOFILE) %s leaves %d descriptors for connections "
        "once the store has its budget (consume_queue.open_files_max fitted to %d, %d more "
        "store files, a margin): each of the %d remoting listeners accepts at most %d "
        "connections (remotingMaxConnections %d), %d of them reserved "
        "(remotingReservedConnections %d); raise the limit (ulimit -n, systemd LimitNOFILE=) "
        "for more", descriptor_limit(), max(0, budget), broker.store.open_files.files_max,
        GROWTH_FILES, listeners, fitted, limits.max_connections, reserved,
        limits.reserved_connections)
    return dataclasses.replace(limits, max_connections=fitted, reserved_connections=reserved)


__all__ = ["connection_budget", "fit_connection_limits"]
