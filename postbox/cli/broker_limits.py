"""The open-file limit of a ``postbox broker`` process: raised to its hard limit before the store
opens (as the JVM does for an Apache broker), then checked against what the store and the
remoting listeners may hold, with a ``[limits]`` warning naming the figure to raise it to.

The store fits its own budget (``consume_queue.open_files_max``, ``storage_engine.store.
open_files``) and ``BrokerNode`` fits the listeners' connection caps to what it leaves
(``broker_node.descriptor_budget``); this adds the connections: each remoting listener accepts
up to its ``max_connections``, each a descriptor. gRPC connections are not capped by a setting
and are not counted.
"""

from __future__ import annotations

import logging
import resource
from typing import Any

from postbox.storage_engine import Broker
from postbox.storage_engine.store.open_files import DESCRIPTORS_PER_FILE, descriptors_in_use

log = logging.getLogger(__name__)


def raise_descriptor_limit() -> None:
    """Lift the soft ``RLIMIT_NOFILE`` to the hard limit (a no-op when they are equal)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or soft == resource.RLIM_INFINITY:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as error:
        log.warning("[limits] cannot raise the open-file limit from %d to %d: %s", soft, hard,
                    error)
        return
    log.info("[limits] open-file limit raised from %d to the hard limit %d", soft, hard)


def connection_capacity(node: Any) -> int:
    """Connections the remoting listeners of ``node`` (a ``RemotingNode``) accept at most."""
    servers = [node.broker_server.server, getattr(node, "namesrv_server", None)]
    return sum(server.limits.max_connections for server in servers if server is not None)


def check_descriptor_limit(broker: Broker, connections: int) -> int | None:
    """Warn when the soft limit is below what this process may need; returns that figure
    (None: no limit, or enough)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    files = broker.store.open_files
    queue_room = max(0, files.files_max - files.open_count) * DESCRIPTORS_PER_FILE
    in_use = descriptors_in_use()
    needed = in_use + queue_room + connections
    if needed <= soft:
        return None
    log.warning("[limits] open-file limit (RLIMIT_NOFILE) %d is below the %d this broker may "
                "need: %d in use, up to %d more for consume-queue files "
                "(consume_queue.open_files_max=%d, fitted to %d), %d remoting connections: "
                "raise it (ulimit -n, systemd LimitNOFILE=) or new connections will be refused "
                "when it runs out", soft, needed, in_use, queue_room,
                broker.store.config.consume_queue.open_files_max, files.files_max, connections)
    return needed
