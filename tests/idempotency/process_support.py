"""Helpers for the tests that run ``tests.support.idempotent_consumer`` as real processes.

``store`` arguments are store URLs (or directories), embedded or remote
(``tests/support/transports.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import Engine, func, select

from postbox import outbox
from postbox.framework import App
from tests.support.consumer_process import BROKER_CONF, embedded_conf
from tests.support.idempotent_consumer import MS_DELAY_LEVELS
from tests.support.paths import REPO_ROOT


def send_stubs(engine: Engine, count: int) -> list[str]:
    """``count`` stubs written through ``outbox.send``, one business transaction each."""
    ids = []
    for index in range(count):
        with engine.begin() as connection:
            ids.append(outbox.send(connection, "orders", f"order-{index}"))
    return ids


def publish_copies(store: Path | str, ids: list[str], copies: int) -> None:
    """Store every message ``copies`` times (round-robin puts the copies on other queues)."""
    app = App(store_url=store, broker_conf=embedded_conf(str(store), {
        **BROKER_CONF, "messageDelayLevel": MS_DELAY_LEVELS}))
    try:
        for _ in range(copies):
            for index, message_id in enumerate(ids):
                app.producer.send("orders", f"order-{index}", unique_key=message_id)
    finally:
        app.stop()


def spawn_consumer(store: Path | str, database_url: str, redis_url: str, *extra: str,
                   ) -> subprocess.Popen:
    """Start a consumer process without waiting for it (see ``wait_ready``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.idempotent_consumer", "--store", str(store),
         "--db", database_url, "--redis", redis_url, *extra],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def wait_ready(process: subprocess.Popen) -> subprocess.Popen:
    """Wait until the consumer process says it consumes."""
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready"
    return process


def start_together(processes: list[subprocess.Popen]) -> None:
    """Start consumers spawned with ``--start-on-go`` at once, once every one has loaded (a
    process whose imports ran slower could otherwise find all the work done), and wait until
    all consume."""
    for process in processes:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"loaded"
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        process.stdin.flush()
    for process in processes:
        wait_ready(process)


def start_consumer(store: Path | str, database_url: str, redis_url: str, *extra: str,
                   ) -> subprocess.Popen:
    """Start a consumer process and wait until it consumes."""
    return wait_ready(spawn_consumer(store, database_url, redis_url, *extra))


def stop_consumer(process: subprocess.Popen) -> None:
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(60) == 0


def stub_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        rows = connection.execute(select(outbox.message_stub.c.status, func.count())
                                  .group_by(outbox.message_stub.c.status)).all()
    return dict(rows)
