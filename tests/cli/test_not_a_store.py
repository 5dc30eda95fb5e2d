"""Inspection commands never create a store: on a directory that is not one they say "not a
store" (one ``error:`` line, exit code 2) and leave the directory exactly as it was. So does
``verify_store``, which reports it as its one problem instead of "0 problems"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from postbox.storage_engine import (
    MessageStore,
    NotAStoreError,
    StoreConfig,
    require_store,
    verify_store,
)
from tests.cli.cli_support import assert_one_error_line, run

INSPECTIONS = [
    ["store", "stats"], ["store", "verify"], ["store", "topics"], ["store", "dump"],
    ["query", "id", "7F00000100002A9F0000000000000000"], ["query", "key", "orders", "o-1"],
    ["query", "unique-key", "orders", "U1"], ["query", "offset", "orders", "0", "0"],
    ["query", "time", "orders", "0", "0"], ["consumer", "progress"],
    ["dlq", "list", "--group", "billing"], ["dlq", "resend", "--group", "billing", "--all"],
]


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``directory`` with its size and modification time."""
    entries = {}
    for folder, names, files in os.walk(directory):
        for name in names + files:
            path = Path(folder, name)
            entries[str(path.relative_to(directory))] = (path.stat().st_size,
                                                        path.stat().st_mtime_ns)
    return entries


@pytest.fixture
def not_a_store(tmp_path: Path) -> Path:
    """A directory with someone's files in it, but no store."""
    directory = tmp_path / "documents"
    (directory / "notes").mkdir(parents=True)
    (directory / "notes" / "todo.txt").write_text("buy milk\n")
    (directory / "config.json").write_text("{}\n")
    return directory


@pytest.mark.parametrize("command", INSPECTIONS, ids=" ".join)
def test_inspection_of_a_directory_that_is_not_a_store_writes_nothing(not_a_store, command):
    before = listing(not_a_store)
    result = run(*command, "--store", str(not_a_store))
    assert_one_error_line(result, "not a store", str(not_a_store))
    assert listing(not_a_store) == before


@pytest.mark.parametrize("command", [["store", "stats"], ["store", "verify"]], ids=" ".join)
def test_an_empty_directory_is_not_a_store_either(tmp_path, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_error_line(run(*command, "--store", str(empty)), "not a store")
    assert list(empty.iterdir()) == []


def test_a_store_without_messages_is_still_a_store(tmp_path):
    """A store opened once and closed has its checkpoint (no segment yet): inspections work."""
    MessageStore.open(StoreConfig(root_dir=tmp_path / "fresh")).close()
    result = run("store", "stats", "--store", str(tmp_path / "fresh"), "--json")
    assert result.exit_code == 0, result.stderr
    assert run("store", "verify", "--store", str(tmp_path / "fresh")).exit_code == 0


def test_verify_store_reports_a_non_store_without_writing(not_a_store, tmp_path):
    before = listing(not_a_store)
    problems = verify_store(not_a_store)
    assert len(problems) == 1 and problems[0].startswith("not a store")
    assert listing(not_a_store) == before
    assert verify_store(tmp_path / "absent")[0].startswith("not a store")
    assert not (tmp_path / "absent").exists()
    with pytest.raises(NotAStoreError, match="no commitlog/ directory and no checkpoint"):
        require_store(not_a_store)
