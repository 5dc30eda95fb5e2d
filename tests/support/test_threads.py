"""The thread fence (``tests/support/threads.py``) fails a test that leaves a thread running.

Each case runs a small test file in a separate pytest process with the plugin loaded, so the
threads those tests leave behind die with that process and not in this one.
"""

from __future__ import annotations

import pytest

from tests.support.paths import REPO_ROOT

CASES = '''
import threading
import time

import pytest

stop = threading.Event()


def test_forgets_its_thread():
    threading.Thread(target=stop.wait, name="forgotten", daemon=True).start()


def test_joins_its_thread():
    thread = threading.Thread(target=time.sleep, args=(0.01,), name="joined")
    thread.start()
    thread.join()


def test_its_thread_ends_soon_after():
    threading.Thread(target=time.sleep, args=(0.3,), name="finishing").start()


@pytest.fixture
def worker():
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="fixture-worker")
    thread.start()
    yield thread
    done.set()


def test_a_fixture_stops_its_thread_at_teardown(worker):
    assert worker.is_alive()


@pytest.mark.leaves_threads("this test's thread outlives it on purpose")
def test_marked_with_a_reason():
    threading.Thread(target=stop.wait, name="allowed", daemon=True).start()


@pytest.mark.leaves_threads
def test_marked_without_a_reason():
    pass
'''


def test_only_the_test_that_leaves_a_thread_fails(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(test_cases=CASES)
    outcome = pytester.runpytest_subprocess("-p", "tests.support.threads",
                                            "-p", "no:cacheprovider", "-rA")
    outcome.stdout.fnmatch_lines([
        "*ERROR at teardown of test_forgets_its_thread*",
        "*the test left 1 thread(s) running (stop or close what it started):*",
        "daemon thread 'forgotten' running Event.wait",
    ])
    outcome.stdout.fnmatch_lines(["*leaves_threads needs a reason*"])
    failed = {line.split("::")[-1].split(" ")[0] for line in outcome.outlines
              if line.startswith("ERROR")}
    passed = {line.split("::")[-1] for line in outcome.outlines if line.startswith("PASSED")}
    assert failed == {"test_forgets_its_thread", "test_marked_without_a_reason"}
    assert passed == {"test_forgets_its_thread", "test_joins_its_thread",
                      "test_its_thread_ends_soon_after",
                      "test_a_fixture_stops_its_thread_at_teardown",
                      "test_marked_with_a_reason"}  # the first passes its call, not teardown
