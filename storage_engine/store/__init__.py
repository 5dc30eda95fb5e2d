"""The store core: commit log, consume queues, key index, flush, recovery, retention.

Imports nothing of the broker or the network layers (``.importlinter``); replication
(``storage_engine.ha``) is the store's own. The names below are the core's front door; the
modules inside are internal to the engine.
"""

from .message_store import MessageStore
from .repair import RepairReport, repair_store
from .store_layout import infer_config, is_store, require_store
from .store_tally import LatencySnapshot, LatencyTally
from .verify import verify_store

__all__ = [
    "LatencySnapshot", "LatencyTally", "MessageStore",
    "RepairReport", "infer_config", "is_store", "repair_store", "require_store", "verify_store",
]
