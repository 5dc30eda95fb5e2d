"""Scratch directories for benchmarks: one fresh directory per measured run, removed afterwards
(also after a failure), under the bench's ``--dir`` (the system temp dir when None)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def temp_dir(parent: str | None, label: str) -> Iterator[Path]:
    """A new directory ``postbox-<label>-*`` under ``parent`` (created if missing)."""
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"postbox-{label}-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
