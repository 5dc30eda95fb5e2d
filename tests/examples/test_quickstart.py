"""The outbox quick start (docs/outbox.md) is code that runs: the manual shows the files of
``examples/quickstart`` exactly as they are, and here they run. A process without the store
sends through the outbox with a plain session (it never touches the store); the worker's relay
publishes and the idempotent handler bills the order once."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from postbox import outbox
from postbox.framework.testing import InlineRunner

REPOSITORY = Path(__file__).resolve().parents[2]
OUTBOX_DOC = REPOSITORY / "docs" / "outbox.md"
QUOTED = re.compile(r"<!-- file: (?P<path>[\w/.]+) -->\n```python\n(?P<code>.*?)```", re.DOTALL)


def test_the_outbox_manual_shows_the_example_files_as_they_are():
    quoted = {match["path"]: match["code"] for match in QUOTED.finditer(OUTBOX_DOC.read_text())}
    assert set(quoted) >= {"examples/quickstart/shop.py", "examples/quickstart/web.py",
                           "examples/quickstart/celery_app.py"}
    for path, code in quoted.items():
        assert code == (REPOSITORY / path).read_text(), f"docs/outbox.md's copy of {path} differs"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SHOP_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("SHOP_DATABASE_URL", f"sqlite:///{tmp_path / 'shop.db'}")
    monkeypatch.setenv("POSTBOX_REDIS_URL", "redis://127.0.0.1:1/0")  # never connected here
    module = importlib.reload(importlib.import_module("examples.quickstart.shop"))
    module.create_tables()
    return module


def test_a_process_without_the_store_sends_and_the_worker_publishes(shop, tmp_path: Path):
    sent = subprocess.run(
        [sys.executable, "-c", "from examples.quickstart.web import place_order; "
                               "print(place_order(1, 'book'))"],
        cwd=REPOSITORY, env={**os.environ}, capture_output=True, text=True, timeout=120,
        check=False)
    assert sent.returncode == 0, sent.stderr
    message_id = sent.stdout.strip()
    assert not (tmp_path / "store").exists()  # the sender never opened the store

    worker = shop.build_worker()
    app = worker.app
    runner = InlineRunner(app)
    try:
        worker.run("relay_pending", scheduled=False)  # what the beat triggers every 5 s
        runner.run_until_idle()
        with worker.engine.connect() as connection:
            billed = connection.execute(select(shop.ledger)).all()
            stub = connection.execute(select(outbox.message_stub.c.status).where(
                outbox.message_stub.c.message_id == message_id)).scalar_one()
    finally:
        app.stop()
    assert [(row.message_id, row.order_id) for row in billed] == [(message_id, 1)]
    assert stub == "confirmed"


def test_celery_app_has_the_outbox_tasks(shop):
    module = importlib.import_module("examples.quickstart.celery_app")
    assert {"postbox.outbox.relay_pending", "postbox.outbox.resend_due",
            "postbox.outbox.cleanup"} <= set(module.celery.tasks)
