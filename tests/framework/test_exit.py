"""A process whose code raises between ``app.start()`` and ``app.stop()`` still exits, and
leaves its store closed cleanly: consumers drained, offsets persisted (on the broker, for a
remote transport), no ``abort`` file.

Each case runs a real Python process (the same interpreter) and waits for it with a timeout;
before the exit hook existed these processes never exited (the app's non-daemon threads kept
the interpreter waiting).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from postbox.framework import App
from postbox.storage_engine import verify_store
from postbox.storage_engine.formats import decode_config_json

EXIT_TIMEOUT_S = 120
REPOSITORY = Path(__file__).resolve().parents[2]

STARTED_AND_RAISES = """
    import threading
    from postbox.framework import App

    app = App(store_url={store!r})
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def bill(message):
        handled.set()

    app.start()
    app.producer.send("orders", b"order 1")
    assert handled.wait(30), "the handler never ran"
    raise RuntimeError("the application failed between start() and stop()")
"""

PRODUCER_ONLY_RAISES = """
    from postbox.framework import App

    app = App(store_url={store!r})
    app.producer.send("orders", b"order 1")   # opens the store; start() never called
    raise RuntimeError("the application failed before stop()")
"""

WITH_BLOCK_RAISES = """
    from postbox.framework import App

    app = App(store_url={store!r})
    with app:
        app.producer.send("orders", b"order 1")
        raise RuntimeError("the block failed")
"""


def run_script(tmp_path: Path, source: str, store_url: str | None = None
               ) -> tuple[subprocess.CompletedProcess, Path]:
    store = tmp_path / "store"
    script = tmp_path / "app_script.py"
    script.write_text(textwrap.dedent(source.format(store=store_url or str(store))))
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}  # this checkout's code
    completed = subprocess.run([sys.executable, str(script)], cwd=REPOSITORY, env=environment,
                               capture_output=True, text=True, timeout=EXIT_TIMEOUT_S,
                               check=False)
    return completed, store


@pytest.mark.parametrize("source", [STARTED_AND_RAISES, PRODUCER_ONLY_RAISES,
                                    WITH_BLOCK_RAISES],
                         ids=["started", "producer-only", "with-block"])
def test_a_process_that_raises_exits_with_a_clean_store(tmp_path, store, source):
    completed, directory = run_script(tmp_path, source, store.url())  # a hang: TimeoutExpired
    assert completed.returncode == 1, completed.stderr
    assert "RuntimeError" in completed.stderr
    assert "cannot schedule new futures" not in completed.stderr
    assert "Exception in thread" not in completed.stderr
    if not store.remote:
        assert not (directory / "abort").exists()
        assert verify_store(directory) == []


def test_offsets_reach_the_broker_when_the_exit_hook_stops_the_app(tmp_path, store):
    completed, _ = run_script(tmp_path, STARTED_AND_RAISES, store.url())
    assert completed.returncode == 1, completed.stderr
    assert "stopping an app left running at interpreter exit" in completed.stderr
    app = App(store_url=store.url())
    try:
        progress = [row for row in app.client.consumer_progress("billing")
                    if row.topic == "orders"]
        assert sum(row.committed_offset for row in progress) == 1  # the one message
    finally:
        app.stop()


@pytest.mark.embedded_only("reads the store's offset file")
def test_offsets_persist_when_the_exit_hook_stops_the_app(tmp_path):
    completed, store = run_script(tmp_path, STARTED_AND_RAISES)
    assert completed.returncode == 1, completed.stderr
    assert "stopping an app left running at interpreter exit" in completed.stderr
    offsets = decode_config_json((store / "config" / "consumerOffset.json").read_text())
    assert sum(offsets["offsetTable"]["orders@billing"].values()) == 1  # the one message
