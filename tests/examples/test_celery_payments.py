"""The payments example under a real Celery worker and beat (subprocesses, real Redis broker,
real database), with a real webhook receiver and SMTP server for the alerts.

- A message lost on purpose between relay and consumer is resent and confirmed; a message whose
  consumer always fails is retried, dead-lettered, and its stub voided, with the webhook and
  the email observed.
- A second beat changes nothing: its task runs are refused by the database lease, no stub is
  sent more often, and the worker reports two schedulers.
- The cleanup task deletes old confirmed stubs in bounded batches.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from examples.payments.app import prepare_database
from examples.payments.config import PaymentsConfig
from examples.payments.faults import LOSE, POISON
from examples.payments.models import ledger
from examples.payments.orders import place_order
from postbox.outbox.clock import utc_now
from postbox.outbox.tables import message_stub, outbox_task
from tests.support.alert_servers import (  # noqa: F401 - fixtures
    SmtpServer,
    WebhookServer,
    smtp_server_fixture,
    webhook_server_fixture,
)
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
TASK_PERIOD_S = 1.0
WAIT_S = 60.0
stub = message_stub.c
task = outbox_task.c


class CeleryProcess:
    """``celery -A examples.payments.celery_app <args>`` with its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], directory: Path) -> None:
        self.name = name
        self.log_path = directory / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "examples.payments.celery_app", *args],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then kill after a while."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


class Deployment:
    """A worker and any number of beats sharing one store, database and Redis."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.processes: list[CeleryProcess] = []

    def start_worker(self) -> CeleryProcess:
        return self._start("worker", ["worker", "--pool=solo", "--loglevel=info",
                                      "--without-heartbeat", "--without-mingle",
                                      "--without-gossip"])

    def start_beat(self, number: int) -> CeleryProcess:
        return self._start(f"beat{number}", ["beat", "--loglevel=info", "--schedule",
                                             str(self.directory / f"beat{number}-schedule")])

    def _start(self, name: str, args: list[str]) -> CeleryProcess:
        process = CeleryProcess(name, args, self.env, self.directory)
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(f"===== {process.name}\n{process.output()[-6000:]}"
                         for process in self.processes)

    def wait_for(self, condition: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
        """``wait_until`` that also fails as soon as one of the processes exits."""
        def holds() -> Any:
            value = condition()
            exited = [process for process in self.processes if process.process.poll() is not None]
            if not value and exited:
                pytest.fail(f"{exited[0].name} exited ({exited[0].process.returncode}) while "
                            f"waiting for {what}\n{self.logs()}")
            return value

        return wait_until(holds, timeout_s, what, interval_s=0.2, detail=self.logs)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


@pytest.fixture
def deployment(tmp_path: Path, database_url: str, redis_server_url: str,
               webhook_server: WebhookServer, smtp_server: SmtpServer) -> Iterator[Deployment]:
    env = {**os.environ,
           "POSTBOX_STORE": str(tmp_path / "store"),
           "POSTBOX_DATABASE_URL": database_url,
           "POSTBOX_REDIS_URL": redis_server_url,
           "POSTBOX_STATE_DIR": str(tmp_path / "state"),
           "PAYMENTS_TASK_PERIOD_S": str(TASK_PERIOD_S),
           "PAYMENTS_CLEANUP_PERIOD_S": str(TASK_PERIOD_S),
           "PAYMENTS_CLEANUP_BATCH_SIZE": "40",
           "PAYMENTS_CLEANUP_MAX_BATCHES": "2",
           "POSTBOX_ALERT_WEBHOOK_URL": webhook_server.url,
           "POSTBOX_ALERT_SMTP_URL": smtp_server.url,
           "POSTBOX_ALERT_EMAIL_TO": "ops@example.com",
           "PYTHONPATH": str(ROOT)}
    prepare_database(PaymentsConfig(database_url=database_url))
    running = Deployment(tmp_path, env)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def engine(make_engine: Callable[..., Engine], database_url: str) -> Engine:
    """An engine on the test's database (the worker's app migrates it)."""
    return make_engine(database_url)


def place(engine: Engine, count: int, fault: str | None = None) -> list[str]:
    """Place orders the way a web process without the store does: stub only; the worker's
    ``relay_pending`` task publishes them."""
    ids = []
    for number in range(count):
        with Session(engine) as session, session.begin():
            ids.append(place_order(session, f"c-{number}", 1_000 + number, fault=fault)[1])
    return ids


def stubs(engine: Engine, ids: list[str]) -> dict[str, Any]:
    with engine.connect() as connection:
        rows = connection.execute(select(stub.message_id, stub.status, stub.send_count,
                                         stub.last_error).where(stub.message_id.in_(ids)))
        return {row.message_id: row for row in rows}


def task_counts(engine: Engine, name: str) -> tuple[int, int]:
    with engine.connect() as connection:
        row = connection.execute(select(task.runs, task.skipped).where(
            task.name == name)).first()
    return (row.runs, row.skipped) if row else (0, 0)


def test_lost_message_resent_poison_voided_with_alerts_and_a_second_beat_is_harmless(
        deployment: Deployment, engine: Engine, webhook_server: WebhookServer,
        smtp_server: SmtpServer) -> None:
    worker = deployment.start_worker()
    deployment.start_beat(1)
    normal = place(engine, 5)
    lost = place(engine, 1, LOSE)[0]
    poison = place(engine, 1, POISON)[0]

    def settled() -> bool:
        found = stubs(engine, [*normal, lost, poison])
        return all(row.status != "unconfirmed" for row in found.values())

    deployment.wait_for(settled, "every stub confirmed or void")
    found = stubs(engine, [*normal, lost, poison])
    assert {found[message_id].status for message_id in normal} == {"confirmed"}
    assert {found[message_id].send_count for message_id in normal} == {1}
    # the lost message: dropped on its first delivery, resent by the rule, then confirmed
    assert found[lost].status == "confirmed"
    assert found[lost].send_count == 2
    # the poison message: retried, dead-lettered, its stub voided with the reason
    assert found[poison].status == "void"
    assert "dead-lettered by consumer group billing" in found[poison].last_error
    assert "card declined permanently" in found[poison].last_error
    with engine.connect() as connection:
        billed = connection.execute(select(ledger.c.message_id)).scalars().all()
    assert sorted(billed) == sorted([*normal, lost])

    # the alert reached the webhook and the mailbox
    webhook_server.wait_for(1, timeout_s=WAIT_S)
    posted = [request.body for request in webhook_server.requests]
    assert [(alert["kind"], alert["message_id"]) for alert in posted] == [
        ("dead_lettered", poison)]
    smtp_server.wait_for(1, timeout_s=WAIT_S)
    mail = smtp_server.messages[0]
    assert mail.rcpt_tos == ["ops@example.com"]
    assert poison in mail.message.get_body(("plain",)).get_content()

    # a second beat: its runs are refused by the lease; nothing is sent twice
    runs_before, skipped_before = task_counts(engine, "resend_due")
    started = time.monotonic()
    deployment.start_beat(2)
    more = place(engine, 4)
    deployment.wait_for(lambda: {row.status for row in stubs(engine, more).values()}
                        == {"confirmed"}, "orders placed under two beats confirmed")
    deployment.wait_for(lambda: task_counts(engine, "resend_due")[1] > skipped_before + 2,
                        "the second beat's resend runs refused")
    time.sleep(3 * TASK_PERIOD_S)
    elapsed = time.monotonic() - started
    runs_after, _ = task_counts(engine, "resend_due")
    # one beat alone would run it about elapsed/period times; two unguarded beats twice that
    assert runs_after - runs_before <= elapsed / (0.8 * TASK_PERIOD_S) + 2
    again = stubs(engine, [*normal, lost, poison, *more])
    assert {again[message_id].send_count for message_id in [*normal, *more]} == {1}
    assert again[lost].send_count == 2
    assert again[poison].status == "void"
    assert len(webhook_server.requests) == 1  # no alert twice
    deployment.wait_for(lambda: "two schedulers" in worker.output(),
                        "the worker's two-schedulers warning")


def test_cleanup_task_deletes_in_bounded_batches(deployment: Deployment, engine: Engine) -> None:
    old = utc_now() - datetime.timedelta(days=30)
    with engine.begin() as connection:
        connection.execute(insert(message_stub), [
            {"message_id": f"old-{number}", "topic": "orders", "content": b"{}",
             "status": "confirmed", "send_count": 1, "created_at": old, "updated_at": old,
             "confirmed_at": old} for number in range(250)])
    deployment.start_worker()
    deployment.start_beat(1)

    def remaining() -> int:
        with engine.connect() as connection:
            return connection.execute(select(func.count()).select_from(message_stub).where(
                stub.message_id.like("old-%"))).scalar_one()

    observed: list[tuple[int, int]] = []

    def done() -> bool:
        left, (runs, _) = remaining(), task_counts(engine, "cleanup")
        observed.append((runs, left))
        return left == 0

    deployment.wait_for(done, "the old confirmed stubs cleaned up")
    # each run deletes at most batch_size x max_batches = 80 rows
    for runs, left in observed:
        assert 250 - left <= 80 * runs, observed
    assert observed[-1][0] >= 4
