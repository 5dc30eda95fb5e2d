"""A store configuration for network tests: 1 MiB commit-log segments and small queue files
(the defaults allocate a 1 GiB segment per store on its first write)."""

from __future__ import annotations

from pathlib import Path

from postbox.storage_engine import StoreConfig

SEGMENT_SIZE_BYTES = 1024 * 1024


def small_store_config(root: Path) -> StoreConfig:
    """A ``StoreConfig`` rooted at ``root`` with small files."""
    return StoreConfig.from_broker_conf({"storePathRootDir": str(root),
                                         "mappedFileSizeCommitLog": str(SEGMENT_SIZE_BYTES),
                                         "mappedFileSizeConsumeQueue": "60000"})
