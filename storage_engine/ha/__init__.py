"""Classic RocketMQ master/slave replication of the commit log (reference §14, stdlib only).

- ``protocol``: the wire format (8-byte reports, 12-byte frame headers) and pure helpers.
- ``connection``: the master's side of one slave (reader and writer threads).
- ``master``: the master's HA service (listen, accept, notify, availability); SYNC_MASTER puts
  wait for a slave's acknowledgement in a ``storage_engine.group_commit.PositionWaiters``.
- ``slave``: the slave's client (connect, apply frames, report, reconnect).
- ``replica_log``: record boundaries and store times of a slave's replicated log.

``MessageStore`` wires these by ``StoreConfig.broker_role`` and ``StoreConfig.ha``; the
operator's view is ``MessageStore.ha_status()``. See docs/replication.md.
"""

from .master import HAMasterService
from .replica_log import LogTimestampDispatcher, RecordBoundary
from .slave import HASlaveClient

__all__ = ["HAMasterService", "HASlaveClient", "LogTimestampDispatcher", "RecordBoundary"]
