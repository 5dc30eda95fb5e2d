"""What the console's browser tests share: signing in, screenshots, and reading back from the
outbox database what a write action left there (stubs by status, the audit rows)."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import create_engine, select

from postbox.outbox.tables import StubStatus, console_audit, message_stub

TOKEN = "console-test-token"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"
"""Where the browser tests leave their screenshots: not in the tracked ``docs/console/``, so a
test run leaves the tree clean; ``make screenshots`` runs these tests and copies them there."""


def shoot(page, name: str) -> None:
    """A full-page screenshot for the docs (``SCREENSHOTS``)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page, name: str = "alice") -> None:
    """Sign in with the write token (the form at the top right)."""
    page.goto("/")
    page.fill("#login input[name=name]", name)
    page.fill("#login input[name=token]", TOKEN)
    page.click("#login button")
    page.wait_for_selector("text=write role")


def stubs(database_url: str, status: StubStatus) -> list[str]:
    """The message ids of the stubs in ``status``."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(select(message_stub.c.message_id).where(
                message_stub.c.status == status.value).order_by(
                message_stub.c.message_id)).scalars())
    finally:
        engine.dispose()


def audit_rows(database_url: str, action: str) -> list[dict]:
    """The ``console_audit`` rows of ``action``, oldest first."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return [dict(row) for row in connection.execute(
                select(console_audit).where(console_audit.c.action == action).order_by(
                    console_audit.c.id)).mappings()]
    finally:
        engine.dispose()


def assert_audited(database_url: str, action: str, actor: str) -> dict:
    """The newest audit row of ``action``: by ``actor``, neither failed nor refused."""
    rows = audit_rows(database_url, action)
    assert rows and rows[-1]["actor"].startswith(actor), rows[-1:]
    assert not re.match(r"(failed|refused)", rows[-1]["outcome"]), rows[-1]
    return rows[-1]
