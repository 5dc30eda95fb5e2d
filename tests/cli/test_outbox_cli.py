"""``postbox outbox list|show|stats|rearm|void|resend`` against a real database.

Stubs are inserted directly into ``message_stub`` of the ``migrated_database_url`` database
(SQLite by default, ``POSTBOX_TEST_DATABASE_URL`` otherwise); the commands run in-process and
their output rules are checked: one JSON document with ``--json``, one ``error:`` line and exit
code 2 for errors (not migrated, unreachable, refused repairs, bad arguments), exit code 1 when
nothing is found.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from postbox import migrations
from postbox.outbox.database import create_database_engine
from postbox.outbox.tables import message_stub, outbox_task
from tests.cli.cli_support import assert_one_error_line, run, run_json
from tests.outbox.conftest import stub_row

T0 = datetime(2025, 3, 4, 5, 6, 7, 123456)
NO_ENV = {"POSTBOX_DATABASE_URL": None}
UNREACHABLE_URL = "postgresql+psycopg://postgres:s3cret@127.0.0.1:1/x"
COMMANDS = [["list"], ["show", "a"], ["stats"], ["rearm", "a"], ["rearm", "--all-void"],
            ["void", "a", "--reason", "test"], ["resend", "a"]]


@pytest.fixture
def url(migrated_database_url: str) -> str:
    return migrated_database_url


def add_stub(engine: Engine, message_id: str, *, seconds: int = 0, **columns: Any) -> None:
    created_at = T0 + timedelta(seconds=seconds)
    values = {"message_id": message_id, "topic": "orders", "content": b"body",
              "created_at": created_at, "updated_at": created_at, "next_resend_at": created_at,
              **columns}
    with engine.begin() as connection:
        connection.execute(insert(message_stub).values(**values))


def outbox(*args: str, db: str, env: dict[str, str | None] | None = None):
    return run("outbox", *args, "--db", db, env={**NO_ENV, **(env or {})})


def outbox_json(*args: str, db: str, expect_exit: int = 0):
    return run_json("outbox", *args, "--db", db, expect_exit=expect_exit, env=NO_ENV)


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    """a: unpublished; b: published to queue 1 offset 7 (2 sends); c: void after 5 failed
    attempts (topic audit); d: confirmed. Created one second apart, a first."""
    add_stub(engine, "a", seconds=0, tags="created", keys="order-1")
    add_stub(engine, "b", seconds=1, queue_id=1, queue_offset=7, published_at=T0,
             send_count=2, next_resend_at=T0 + timedelta(minutes=1))
    add_stub(engine, "c", seconds=2, topic="audit", status="void", send_count=5,
             last_error="StoreClosedError: the store is closed " + "x" * 200)
    add_stub(engine, "d", seconds=3, status="confirmed", send_count=1, confirmed_at=T0)
    return engine


# ---- list -------------------------------------------------------------------------------------

def test_list_shows_every_stub_newest_first(url: str, seeded: Engine) -> None:
    result = outbox("list", db=url)

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in "abcd"}
    assert list(rows) == ["d", "c", "b", "a"]
    assert "void" in rows["c"] and "audit" in rows["c"] and "StoreClosedError" in rows["c"]
    assert "x" * 80 not in rows["c"]  # the last error is cut short
    assert "1/7" in rows["b"] and "2025-03-04 05:07:07" in rows["b"]
    assert "created" in rows["a"] and "unconfirmed" in rows["a"]
    assert "stubs: 4" in result.stdout


def test_list_json_has_every_field_with_utc_times(url: str, seeded: Engine) -> None:
    document = outbox_json("list", db=url)

    assert list(document) == ["stubs"]
    assert [stub["message_id"] for stub in document["stubs"]] == ["d", "c", "b", "a"]
    b = document["stubs"][2]
    assert (b["status"], b["send_count"], b["queue_id"], b["queue_offset"]) == (
        "unconfirmed", 2, 1, 7)
    assert b["created_at"] == "2025-03-04T05:06:08.123456Z"
    assert datetime.fromisoformat(b["published_at"]).replace(tzinfo=None) == T0
    assert "content" not in b


def test_list_filters_and_pages(url: str, seeded: Engine) -> None:
    void = outbox_json("list", "--status", "void", db=url)
    assert [stub["message_id"] for stub in void["stubs"]] == ["c"]
    orders = outbox_json("list", "--topic", "orders", "--status", "unconfirmed", db=url)
    assert [stub["message_id"] for stub in orders["stubs"]] == ["b", "a"]

    page = outbox("list", "--limit", "2", db=url)
    assert page.exit_code == 0, page.stderr
    assert "limit 2 reached; older ones: --before 2025-03-04T05:06:09.123456Z" in page.stdout
    older = outbox_json("list", "--limit", "2", "--before", "2025-03-04T05:06:09.123456Z",
                        db=url)
    assert [stub["message_id"] for stub in older["stubs"]] == ["b", "a"]
    with_offset = outbox_json("list", "--before", "2025-03-04T07:06:08.2+02:00", db=url)
    assert [stub["message_id"] for stub in with_offset["stubs"]] == ["b", "a"]


def test_list_of_nothing_exits_1(url: str, seeded: Engine) -> None:
    human = outbox("list", "--topic", "nowhere", db=url)
    assert human.exit_code == 1
    assert human.stdout == ""
    assert "no stubs with topic nowhere" in human.stderr

    document = outbox_json("list", "--status", "confirmed", "--topic", "audit", db=url,
                           expect_exit=1)
    assert document == {"stubs": []}


@pytest.mark.parametrize(("args", "fragment"), [
    (["--limit", "0"], "limit must be between 1 and 1000"),
    (["--limit", "1001"], "limit must be between 1 and 1000"),
    (["--before", "yesterday"], "not an ISO 8601 time")])
def test_list_bad_arguments_are_one_error_line(url: str, args: list[str], fragment: str) -> None:
    assert_one_error_line(outbox("list", *args, db=url), fragment)


def test_list_unknown_status_is_a_usage_error(url: str) -> None:
    result = outbox("list", "--status", "lost", db=url)
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr


# ---- show -------------------------------------------------------------------------------------

def test_show_one_stub(url: str, seeded: Engine) -> None:
    human = outbox("show", "c", db=url)
    assert human.exit_code == 0, human.stderr
    assert "stub c" in human.stdout
    assert "void" in human.stdout and "audit" in human.stdout
    assert "x" * 150 in human.stdout.replace("\n", "").replace(" ", "")  # the whole error
    assert "created_at (UTC)" in human.stdout and "2025-03-04 05:06:09.123456" in human.stdout

    document = outbox_json("show", "b", db=url)
    assert document["stub"]["message_id"] == "b"
    assert document["stub"]["queue_offset"] == 7
    assert document["stub"]["lease_owner"] is None


def test_show_of_a_missing_stub_exits_1(url: str, seeded: Engine) -> None:
    human = outbox("show", "ghost", db=url)
    assert human.exit_code == 1
    assert human.stdout == ""
    assert "no stub 'ghost'" in human.stderr
    assert outbox_json("show", "ghost", db=url, expect_exit=1) == {"stub": None}


# ---- stats ------------------------------------------------------------------------------------

def test_stats(url: str, seeded: Engine) -> None:
    with seeded.begin() as connection:
        connection.execute(insert(outbox_task).values(
            name="resend_due", runs=3, skipped=1, last_started_at=T0, last_finished_at=T0,
            last_scheduler="beat@host", updated_at=T0))

    document = outbox_json("stats", db=url)

    assert document["by_status"] == {"unconfirmed": 2, "confirmed": 1, "void": 1}
    assert document["by_topic"] == {"audit": {"unconfirmed": 0, "confirmed": 0, "void": 1},
                                    "orders": {"unconfirmed": 2, "confirmed": 1, "void": 0}}
    assert (document["due_for_resend"], document["unpublished"]) == (1, 1)
    assert document["oldest_unconfirmed_at"] == "2025-03-04T05:06:07.123456Z"
    assert document["oldest_unconfirmed_age_s"] > 0
    assert document["max_send_count_seen"] == 5
    assert (document["in_flight_logs"], document["processed"]) == (0, 0)
    assert document["tasks"][0]["name"] == "resend_due"
    assert document["tasks"][0]["last_started_at"] == "2025-03-04T05:06:07.123456Z"
    assert "s3cret" not in document["database"]

    human = outbox("stats", db=url)
    assert human.exit_code == 0, human.stderr
    for fragment in ("void stubs", "unpublished (relay's backlog)", "due for resend check",
                     "by topic (2)", "audit", "periodic tasks (1)", "resend_due", "beat@host",
                     "2025-03-04 05:06:07", " ago)"):
        assert fragment in human.stdout, fragment


def test_stats_of_an_empty_outbox(url: str) -> None:
    human = outbox("stats", db=url)
    assert human.exit_code == 0, human.stderr
    assert "unconfirmed stubs" in human.stdout
    assert "no periodic outbox task has run yet" in human.stderr
    document = outbox_json("stats", db=url)
    assert document["by_status"] == {"unconfirmed": 0, "confirmed": 0, "void": 0}
    assert (document["tasks"], document["oldest_unconfirmed_age_s"]) == ([], None)


# ---- rearm ------------------------------------------------------------------------------------

def test_rearm_ids(url: str, seeded: Engine) -> None:
    document = outbox_json("rearm", "c", db=url)

    assert document == {"rearmed": ["c"], "count": 1}
    row = stub_row(seeded, "c")
    assert (row["status"], row["send_count"], row["published_at"]) == ("unconfirmed", 0, None)


def test_rearm_human_output(url: str, seeded: Engine) -> None:
    add_stub(seeded, "e", status="void")
    result = outbox("rearm", "c", "e", db=url)
    assert result.exit_code == 0, result.stderr
    assert "re-armed 2 stub(s): c, e" in result.stdout
    assert "relay" in result.stdout


def test_rearm_all_void(url: str, seeded: Engine) -> None:
    add_stub(seeded, "e", status="void")
    assert outbox_json("rearm", "--all-void", db=url) == {"rearmed": ["c", "e"], "count": 2}

    again = outbox("rearm", "--all-void", db=url)
    assert again.exit_code == 1
    assert "no void stubs" in again.stderr
    assert outbox_json("rearm", "--all-void", db=url, expect_exit=1) == {"rearmed": [],
                                                                         "count": 0}


def test_rearm_of_a_stub_that_is_not_void_is_one_error_line(url: str, seeded: Engine) -> None:
    result = outbox("rearm", "c", "a", "ghost", db=url)
    assert_one_error_line(result, "a (unconfirmed)", "ghost (missing)", "nothing changed")
    assert stub_row(seeded, "c")["status"] == "void"
    assert_one_error_line(outbox("rearm", "a", "--json", db=url), "a (unconfirmed)")


@pytest.mark.parametrize("args", [[], ["c", "--all-void"]])
def test_rearm_wants_ids_or_all_void(url: str, seeded: Engine, args: list[str]) -> None:
    assert_one_error_line(outbox("rearm", *args, db=url), "--all-void")
    assert stub_row(seeded, "c")["status"] == "void"


# ---- void -------------------------------------------------------------------------------------

def test_void(url: str, seeded: Engine) -> None:
    assert outbox_json("void", "a", "b", "--reason", "order cancelled", db=url) == {
        "voided": ["a", "b"], "count": 2}
    assert stub_row(seeded, "a")["last_error"] == "voided by operator: order cancelled"

    add_stub(seeded, "e")
    human = outbox("void", "e", "--reason", "test", db=url)
    assert human.exit_code == 0, human.stderr
    assert "voided 1 stub(s): e" in human.stdout


def test_void_refuses_a_confirmed_stub(url: str, seeded: Engine) -> None:
    assert_one_error_line(outbox("void", "a", "d", "--reason", "x", db=url), "d (confirmed)")
    assert stub_row(seeded, "a")["status"] == "unconfirmed"
    assert_one_error_line(outbox("void", "a", "--reason", " ", db=url), "reason is required")


def test_void_requires_a_reason(url: str, seeded: Engine) -> None:
    result = outbox("void", "a", db=url)
    assert result.exit_code == 2
    assert "--reason" in result.stderr
    assert stub_row(seeded, "a")["status"] == "unconfirmed"


# ---- resend -----------------------------------------------------------------------------------

def test_resend(url: str, seeded: Engine) -> None:
    document = outbox_json("resend", "b", "c", "--max-send-count", "3", db=url)

    assert document == {"scheduled": ["b", "c"], "count": 2}
    b, c = stub_row(seeded, "b"), stub_row(seeded, "c")
    assert (b["status"], b["send_count"], b["published_at"]) == ("unconfirmed", 2, None)
    assert (c["status"], c["send_count"]) == ("unconfirmed", 2)  # 5 sends, max 3: one more

    human = outbox("resend", "a", db=url)
    assert human.exit_code == 0, human.stderr
    assert "scheduled for publishing 1 stub(s): a" in human.stdout


def test_resend_refuses_a_confirmed_stub(url: str, seeded: Engine) -> None:
    assert_one_error_line(outbox("resend", "b", "d", db=url), "d (confirmed)")
    assert stub_row(seeded, "b")["published_at"] == T0
    assert_one_error_line(outbox("resend", "b", "--max-send-count", "0", db=url),
                          "max_send_count must be >= 1")


# ---- the database -----------------------------------------------------------------------------

@pytest.mark.parametrize("args", COMMANDS)
def test_unmigrated_database_is_one_error_line(database_url: str, args: list[str]) -> None:
    engine = create_database_engine(database_url)  # an existing database without the tables
    engine.connect().close()
    engine.dispose()
    assert_one_error_line(outbox(*args, db=database_url), "not migrated",
                          "run `postbox db upgrade`")
    assert_one_error_line(outbox(*args, "--json", db=database_url), "postbox db upgrade")


def test_older_revision_is_one_error_line(database_url: str) -> None:
    migrations.upgrade(database_url, "0001")
    assert_one_error_line(outbox("stats", db=database_url), "outbox_task table",
                          "run `postbox db upgrade`")


@pytest.mark.parametrize("args", COMMANDS)
def test_unreachable_database_is_one_error_line(args: list[str]) -> None:
    result = outbox(*args, "--json", db=UNREACHABLE_URL)
    assert_one_error_line(result, "127.0.0.1", "Connection refused")
    assert "s3cret" not in result.stderr and "***" in result.stderr


def test_bad_url_is_one_error_line() -> None:
    assert_one_error_line(outbox("list", db="nodialect://x"), "nodialect")


def test_database_from_the_environment(url: str, seeded: Engine) -> None:
    result = run("outbox", "list", "--json", env={"POSTBOX_DATABASE_URL": url})
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["stubs"]) == 4
