"""Test directories and real small file systems (plugin in ``tests/conftest.py``).

A passed test's ``tmp_path`` is deleted once the test is over, after every fixture's teardown
(a fixture may still read the directory then: ``open_store`` verifies the stores it opened).
Example and demo stores allocate a 1 GiB commit-log segment each, and CI's suites run side by
side: kept until the session ends, their directories once took the disk past the store's 90 %
``diskSpaceWarningLevelRatio``, and every write was refused. A test that failed in any phase
keeps its directory. (pytest's own ``tmp_path_retention_policy = "failed"`` deletes it when
``tmp_path`` itself is torn down, which can come before fixtures that still use it.)
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_TMP_PATH = pytest.StashKey[Path]()
_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> object:
    """Remember the test's ``tmp_path`` (asked for by the test or by any of its fixtures)."""
    try:
        return (yield)
    finally:
        path = getattr(item, "funcargs", {}).get("tmp_path")
        if isinstance(path, Path):
            item.stash[_TMP_PATH] = path


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> pytest.TestReport:
    """Note a failed phase; after the teardown of a test that never failed, delete its
    ``tmp_path``."""
    report: pytest.TestReport = yield
    if report.failed:
        item.stash[_FAILED] = True
    if call.when == "teardown" and not item.stash.get(_FAILED, False):
        path = item.stash.get(_TMP_PATH, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
    return report


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Factory: ``tmpfs("40m")`` mounts a real tmpfs of that size under ``tmp_path`` (a real
    file system that fills up; needs permission to mount) and returns its mount point;
    everything mounted is unmounted at teardown."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        mount_point = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
        mount_point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(mount_point)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(mount_point)
        return mount_point

    yield mount
    for mount_point in reversed(mounted):
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@contextmanager
def scratch_dir(factory: pytest.TempPathFactory, basename: str) -> Iterator[Path]:
    """A directory for a module- or session-scoped fixture, deleted when the fixture ends.

    A passed test's ``tmp_path`` is deleted once it is over (above), but directories from
    ``tmp_path_factory`` stay until the session ends. A fixture whose store or copies take
    gigabytes (a default 1 GiB commit-log segment is allocated on disk) uses this, so suites
    that run side by side in CI do not add up to a disk past the store's 90 %
    ``diskSpaceWarningLevelRatio``.
    """
    directory = factory.mktemp(basename)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
