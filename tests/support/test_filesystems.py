"""Test directories (``tests/support/filesystems.py``): a passed test's ``tmp_path`` is deleted
after every fixture's teardown; a test that failed in any phase keeps it.

The cases run in a separate pytest process with the plugin loaded; each writes where its
``tmp_path`` is, so this test can look afterwards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

CASES = '''
import os
from pathlib import Path

import pytest

RECORD = Path(os.environ["TMP_PATHS_RECORD"])


def note(tmp_path, name):
    (tmp_path / "data").write_text(name)
    with RECORD.open("a") as record:
        record.write(f"{name} {tmp_path}\\n")


@pytest.fixture
def reads_at_teardown(tmp_path):
    yield tmp_path
    assert (tmp_path / "data").read_text() == "fixture"  # still there at this teardown


def test_passes(tmp_path):
    note(tmp_path, "passes")


def test_fails(tmp_path):
    note(tmp_path, "fails")
    assert False


@pytest.fixture
def breaks_at_teardown(tmp_path):
    yield tmp_path
    raise RuntimeError("teardown failed")


def test_fails_at_teardown(breaks_at_teardown):
    note(breaks_at_teardown, "teardown")


def test_fixture_reads_at_teardown(reads_at_teardown):
    note(reads_at_teardown, "fixture")
'''


def test_only_passed_tests_lose_their_directory(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    record = tmp_path / "record.txt"
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("TMP_PATHS_RECORD", str(record))
    pytester.makepyfile(test_cases=CASES)
    outcome = pytester.runpytest_subprocess("-p", "tests.support.filesystems",
                                            "-p", "no:cacheprovider")
    outcome.assert_outcomes(passed=3, failed=1, errors=1)
    paths = dict(line.split(" ", 1) for line in record.read_text().splitlines())
    assert set(paths) == {"passes", "fails", "teardown", "fixture"}
    kept = {name for name, path in paths.items() if Path(path).exists()}
    assert kept == {"fails", "teardown"}
