"""One broker config file (``{root}/config/<name>.json``) with its ``.bak``: crash-safe replace.

Files are written in fastjson's dialect (``formats.fastjson``) as UTF-8, so a RocketMQ broker and
Postbox read each other's files (reference §9).

Persist sequence (``persist``), and what a crash at each point leaves behind::

    1. write <name>.tmp, fsync it     crash: <name> and <name>.bak untouched; the partial .tmp
                                      is ignored by load and truncated by the next persist
    2. rename <name> -> <name>.bak    crash: <name> is missing, <name>.bak holds the previous
                                      document; load falls back to it
    3. rename <name>.tmp -> <name>    crash: <name> is the new document (fsynced in step 1)
    4. fsync the directory            makes both renames durable

The new bytes are durable before any rename, and each rename is atomic, so after any crash
(process kill or power loss, whichever renames reached the disk) ``<name>`` or ``<name>.bak``
holds a complete document: the new one or the previous one. ``<name>.bak`` is always the
previous content of ``<name>``, as RocketMQ keeps it.

Load rules (``load``), RocketMQ's plus "bad input never loses data":

* ``<name>`` decodes → that document.
* ``<name>`` missing, empty or undecodable → ``<name>.bak``. An undecodable ``<name>`` is renamed
  to ``<name>.corrupt-<epoch ms>`` (an empty one is removed: it holds nothing) and a
  ``[config]`` WARNING is logged. Moving it out of the way matters: otherwise the next persist
  would rotate the bad file into ``.bak`` over the only good copy.
* neither file exists (or both are empty) → ``None``: a fresh store, or RocketMQ's "missing
  ``.bak`` counts as success".
* no usable document but something undecodable → ``ConfigFileError`` naming the files and
  saying what to do (restore them from a backup, or delete them to start empty). Nothing is
  renamed or deleted in that case.

Thread-safety: ``load`` and ``persist`` of one ``ConfigFile`` are serialized by a lock. One
process owns a store directory (the store lock), so no other writer runs concurrently.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..clock import Clock, SystemClock
from ..errors import CorruptionError, StorageIOError
from ..formats.fastjson import decode_config_json, encode_config_json
from ..store.fsutil import fsync_dir

log = logging.getLogger(__name__)

BACKUP_SUFFIX = ".bak"
TEMP_SUFFIX = ".tmp"
CORRUPT_SUFFIX = ".corrupt-"


class ConfigFileError(CorruptionError):
    """A config file cannot be loaded: neither it nor its ``.bak`` holds a usable document.

    The message names the files and what to do about them; ``path`` is the main file.
    """


class ConfigFile:
    """``<path>`` plus ``<path>.bak``: load with fallback, persist with an atomic replace."""

    def __init__(self, path: str | os.PathLike, *, clock: Clock | None = None) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + BACKUP_SUFFIX)
        self.temp_path = self.path.with_name(self.path.name + TEMP_SUFFIX)
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self.loaded_main = False
        """Whether the last ``load`` returned the main file's document (not ``.bak``'s)."""

    # ----------------------------------------------------------------------------------------
    # Load
    # ----------------------------------------------------------------------------------------

    def load(self, convert: Callable[[Any], Any] | None = None) -> Any | None:
        """The stored document (``convert``-ed), from ``<path>`` or else ``<path>.bak``; None if
        neither holds one.

        ``convert`` turns the decoded JSON into the caller's shape and raises ``ValueError``
        when the shape is wrong; such a file counts as undecodable, like bad JSON.

        Raises:
            ConfigFileError: nothing usable, and at least one file is undecodable.
            StorageIOError: a file exists but cannot be read, renamed or removed.
        """
        with self._lock:
            self.loaded_main = False
            main = self._read(self.path)
            if main:
                try:
                    document = _decode(main, convert)
                    self.loaded_main = True
                    return document
                except ValueError as error:
                    problem = f"{self.path} is undecodable ({error})"
                    return self._load_backup(main, problem, convert)
            state = "missing" if main is None else "empty"
            return self._load_backup(main, f"{self.path} is {state}", convert)

    def _load_backup(self, main: bytes | None, main_problem: str,
                     convert: Callable[[Any], Any] | None) -> Any | None:
        """Fall back to ``.bak`` after ``main`` (None = missing) turned out unusable."""
        backup = self._read(self.backup_path)
        if not backup:
            if main:  # undecodable main file and nothing to fall back to
                raise ConfigFileError(
                    f"{main_problem}, and {self.backup_path} is "
                    f"{'missing' if backup is None else 'empty'}. Restore {self.path.name} from "
                    f"a backup, or move {self.path} out of the way (rename or delete it) to "
                    f"start with an empty {self.path.name} (its entries are lost)",
                    path=str(self.path))
            if main is not None:
                log.warning("[config] %s; no %s either, starting empty", main_problem,
                            self.backup_path.name)
            return None
        try:
            document = _decode(backup, convert)
        except ValueError as error:
            raise ConfigFileError(
                f"{main_problem}, and {self.backup_path} is undecodable ({error}). Restore "
                f"{self.path.name} (and {self.backup_path.name}) from a backup, or move "
                f"{self.path} and {self.backup_path} out of the way (rename or delete them) to "
                f"start with an empty {self.path.name} (its entries are lost)",
                path=str(self.path)) from error
        if main is not None:
            self._set_aside(main)
        log.warning("[config] %s; loaded the previous version from %s", main_problem,
                    self.backup_path.name)
        return document

    def _set_aside(self, main: bytes) -> None:
        """Move an unusable main file out of the way (kept if it has bytes, removed if empty)."""
        try:
            if not main:
                self.path.unlink()
                fsync_dir(self.path.parent)
                return
            target = self._corrupt_path()
            os.replace(self.path, target)
            fsync_dir(self.path.parent)
        except OSError as error:
            raise StorageIOError(f"cannot move the unusable {self.path} aside: {error}",
                                 path=str(self.path)) from error
        log.warning("[config] kept the undecodable %s (%d bytes) as %s", self.path.name,
                    len(main), target.name)

    def _corrupt_path(self) -> Path:
        stem = f"{self.path.name}{CORRUPT_SUFFIX}{self._clock.now_ms()}"
        target = self.path.with_name(stem)
        attempt = 0
        while target.exists():
            attempt += 1
            target = self.path.with_name(f"{stem}-{attempt}")
        return target

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageIOError(f"cannot read {path}: {error}", path=str(path)) from error

    # ----------------------------------------------------------------------------------------
    # Persist
    # ----------------------------------------------------------------------------------------

    def persist(self, document: Any) -> None:
        """Replace the file with ``document`` (fastjson dialect); the old content becomes .bak.

        Raises:
            TypeError, ValueError: ``document`` holds something a config file cannot hold.
            StorageIOError: a write, fsync or rename failed (the previous files stay loadable).
        """
        self.persist_text(encode_config_json(document))

    def persist_text(self, text: str) -> None:
        """``persist`` for a document already encoded with ``encode_config_json``."""
        data = text.encode("utf-8")
        with self._lock:
            try:
                self._ensure_directory()
                self._write_temp(data)
                try:
                    os.replace(self.path, self.backup_path)
                except FileNotFoundError:
                    pass  # first persist, or the main file was set aside at load
                os.replace(self.temp_path, self.path)
                fsync_dir(self.path.parent)
            except OSError as error:
                raise StorageIOError(f"cannot persist {self.path}: {error}",
                                     path=str(self.path)) from error

    def _ensure_directory(self) -> None:
        directory = self.path.parent
        if directory.is_dir():
            return
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)

    def _write_temp(self, data: bytes) -> None:
        fd = os.open(self.temp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)


def _decode(data: bytes, convert: Callable[[Any], Any] | None) -> Any:
    """UTF-8 → fastjson/strict JSON → ``convert``; every failure is a ``ValueError``."""
    document = decode_config_json(data.decode("utf-8"))
    return document if convert is None else convert(document)
