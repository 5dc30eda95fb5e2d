"""A test that leaves a thread running fails (a pytest plugin, loaded by ``tests/conftest.py``).

The autouse fixture ``no_thread_left_behind`` notes the threads alive when a test's
function-scoped fixtures start (session-, package-, module- and class-scoped fixtures are set up
before it, so the threads of a live RocketMQ lab, a session Redis or a module's Spark session
belong to the baseline), and after every function-scoped fixture has been torn down it waits up
to ``GRACE_S`` for the threads the test started to end. A thread still alive then fails the test
(an error at teardown) with its name, its target and the stack it is stuck in: a service whose
``stop()`` returns before its thread ends, a consumer or executor nobody closed, a daemon left
mid-write.

- Threads a library keeps beyond what a test can close are exempt by name or class
  (``LIBRARY_THREADS``: a pattern each, with its reason); nothing else is.
- ``@pytest.mark.leaves_threads(reason)`` exempts one test whose threads outlive it by design;
  the reason is required.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback
from collections.abc import Iterator

import pytest

GRACE_S = 2.0  # a thread told to stop may still be finishing its last round
MARKER = "leaves_threads"

# Threads of a library that no public call of it ends (``re.fullmatch`` on the thread's name
# or on its class as ``module.QualName``).
LIBRARY_THREADS: dict[str, str] = {
    "channel_io_loop_thread": "rocketmq-python-client: one asyncio loop shared by every client "
                              "of the process, started by the first and never stopped",
    r".+_message_decode_thread_\d+": "rocketmq-python-client 5.1.2: a consumer's decode pool, "
                                     "which its shutdown() leaves running",
    r"Thread-\d+ \(_poll_wrapper\)": "grpc.aio's completion-queue poller, alive while any aio "
                                     "channel object is (Postbox uses no grpc.aio; the official "
                                     "client shut down after its server went away keeps one)",
    r"py4j\.clientserver\.FinalizerWorker": "py4j: one per Java gateway, and PySpark keeps its "
                                            "gateway for the process after SparkSession.stop()",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(reason): the test's threads may outlive it (reason required)")


def _exempt(thread: threading.Thread) -> bool:
    kind = f"{type(thread).__module__}.{type(thread).__qualname__}"
    return any(re.fullmatch(pattern, thread.name) or re.fullmatch(pattern, kind)
               for pattern in LIBRARY_THREADS)


def _describe(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    where = getattr(target, "__qualname__", None) or type(thread).__qualname__
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    stack = "".join(traceback.format_stack(frame, limit=6)) if frame is not None else ""
    kind = "daemon " if thread.daemon else ""
    return f"{kind}thread {thread.name!r} running {where}\n{stack}"


def threads_left(before: set[threading.Thread], grace_s: float = GRACE_S
                 ) -> list[threading.Thread]:
    """The threads not in ``before`` still alive after waiting up to ``grace_s`` in all."""
    deadline = time.monotonic() + grace_s
    left = []
    for thread in threading.enumerate():
        if thread in before or _exempt(thread) or thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(thread)
    return left


@pytest.fixture(autouse=True)
def no_thread_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None and not (marker.args or marker.kwargs.get("reason")):
        pytest.fail(f"@pytest.mark.{MARKER} needs a reason")
    before = set(threading.enumerate())
    yield
    if marker is not None:
        return
    left = threads_left(before)
    if left:
        pytest.fail(f"the test left {len(left)} thread(s) running (stop or close what it "
                    f"started):\n" + "\n".join(_describe(thread) for thread in left),
                    pytrace=False)
