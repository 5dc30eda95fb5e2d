"""The outbox migrations against a real database (SQLite, or ``POSTBOX_TEST_DATABASE_URL``).

Upgrade, downgrade and upgrade again; no drift between the head revision and ``outbox.tables``
(checked with the same ``compare_type`` that ``env.py`` uses, and shown to catch a real
difference); names, defaults and constraints as ``tables.py`` declares them; ``postbox db``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    CheckConstraint,
    DateTime,
    Engine,
    LargeBinary,
    MetaData,
    String,
    Text,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError

from postbox import migrations
from postbox.migrations.api import SCRIPT_LOCATION
from postbox.migrations.compare import applies_to, compare_type, objects_for
from postbox.outbox.tables import message_resend, message_stub, metadata
from tests.cli.cli_support import assert_one_error_line, run, run_json
from tests.support.services import database_backend

OUTBOX_TABLES = {"message_stub", "message_log", "message_processed", "message_resend",
                 "outbox_task"}
UNREACHABLE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/x"
NO_ENV = {"POSTBOX_DATABASE_URL": None}
CLAIM_INDEXES = {"ix_message_stub_unpublished",
                 "ix_message_stub_status_published_at_next_resend_at"}


@pytest.fixture
def engine(make_engine: Callable[..., Engine], database_url: str) -> Engine:
    """A plain SQLAlchemy engine on the test's database, not migrated."""
    return make_engine(database_url, plain=True)


def table_names(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def drift(engine: Engine, target: MetaData) -> list:
    """What autogenerate would change to make the database match ``target``."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={
            "compare_type": compare_type,
            "include_object": objects_for(connection.dialect.name)})
        return compare_metadata(context, target)


def index_names(engine: Engine) -> set[str]:
    return {index["name"] for index in inspect(engine).get_indexes("message_stub")}


def modified_columns(diffs: list) -> set[tuple[str, str]]:
    """(table, column) of every ``modify_type`` in ``diffs`` (nested per column by Alembic)."""
    flat = [item for diff in diffs for item in (diff if isinstance(diff, list) else [diff])]
    return {(item[2], item[3]) for item in flat if item[0] == "modify_type"}


def stub_columns(engine: Engine) -> set[str]:
    """The column names of ``message_stub`` as the database has them."""
    return {column["name"] for column in inspect(engine).get_columns("message_stub")}


# --- the Python API ---------------------------------------------------------------------------

def test_head_is_the_message_group_revision() -> None:
    assert migrations.head() == "0006"


def test_upgrade_creates_the_outbox_tables(database_url: str, engine: Engine) -> None:
    assert migrations.current(database_url) is None
    assert not OUTBOX_TABLES & table_names(engine)

    migrations.upgrade(database_url)

    assert OUTBOX_TABLES | {"alembic_version"} <= table_names(engine)
    assert migrations.current(database_url) == migrations.head()


def test_downgrade_to_base_removes_them_and_upgrade_works_again(
        database_url: str, engine: Engine) -> None:
    migrations.upgrade(database_url)

    migrations.downgrade(database_url)

    assert migrations.current(database_url) is None
    assert not OUTBOX_TABLES & table_names(engine)

    migrations.upgrade(database_url, "head")
    assert migrations.current(database_url) == "0006"
    assert table_names(engine) >= OUTBOX_TABLES
    assert drift(engine, metadata) == []


def test_downgrade_one_step_keeps_the_stubs(database_url: str, engine: Engine) -> None:
    migrations.upgrade(database_url)
    now = datetime.datetime(2025, 1, 2, 3, 4, 5)
    with engine.begin() as connection:
        connection.execute(insert(message_stub).values(
            message_id="kept", topic="orders", content=b"x", created_at=now, updated_at=now,
            overtaken_at=now, expected_groups="billing shipping", message_group="order-42"))
        connection.execute(insert(message_resend).values(
            consumer_group="shipping", message_id="kept", topic="%RETRY%shipping", queue_id=0,
            queue_offset=3, resent_at=now))

    migrations.downgrade(database_url, "-1")

    assert migrations.current(database_url) == "0005"
    assert "message_group" not in stub_columns(engine)
    migrations.downgrade(database_url, "-1")

    assert migrations.current(database_url) == "0004"
    assert CLAIM_INDEXES.isdisjoint(index_names(engine))
    migrations.downgrade(database_url, "-1")

    assert migrations.current(database_url) == "0003"
    assert "console_audit" not in table_names(engine)
    migrations.downgrade(database_url, "-1")

    assert migrations.current(database_url) == "0002"
    assert "message_resend" not in table_names(engine)
    assert "expected_groups" not in stub_columns(engine)
    migrations.downgrade(database_url, "-1")

    assert migrations.current(database_url) == "0001"
    assert "outbox_task" not in table_names(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT message_id FROM message_stub")).scalars().all() \
            == ["kept"]
    migrations.upgrade(database_url)
    assert drift(engine, metadata) == []
    with engine.connect() as connection:  # the kept stub went back to "first group confirms"
        assert connection.execute(select(message_stub.c.expected_groups)).scalars().all() \
            == [None]
        assert connection.execute(select(message_stub.c.message_group)).scalars().all() \
            == [None]


def test_upgrade_twice_is_a_no_op(database_url: str) -> None:
    migrations.upgrade(database_url)
    migrations.upgrade(database_url)
    assert migrations.current(database_url) == "0006"


def test_unknown_revision_is_a_migration_error(database_url: str) -> None:
    with pytest.raises(migrations.MigrationError, match="bogus"):
        migrations.upgrade(database_url, "bogus")


def test_unreachable_database_is_a_migration_error() -> None:
    with pytest.raises(migrations.MigrationError, match=r"127\.0\.0\.1") as caught:
        migrations.current(UNREACHABLE_URL)
    assert isinstance(caught.value.__cause__, DBAPIError)
    with pytest.raises(migrations.MigrationError, match="cannot upgrade"):
        migrations.upgrade(UNREACHABLE_URL)


def test_password_is_hidden_in_errors() -> None:
    with pytest.raises(migrations.MigrationError) as caught:
        migrations.current("postgresql+psycopg://postgres:s3cret@127.0.0.1:1/x")
    assert "s3cret" not in str(caught.value)
    assert "***" in str(caught.value)


# --- the schema the head revision creates -----------------------------------------------------

def test_no_drift_after_upgrade(database_url: str, engine: Engine) -> None:
    migrations.upgrade(database_url)
    assert drift(engine, metadata) == []


def test_drift_check_sees_a_changed_type(database_url: str, engine: Engine) -> None:
    migrations.upgrade(database_url)
    changed = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["message_stub"].c.offset_msg_id.type = String(80)

    assert modified_columns(drift(engine, changed)) == {("message_stub", "offset_msg_id")}


@pytest.mark.only_on_databases("mysql")
def test_drift_check_sees_mysql_variants(database_url: str, engine: Engine) -> None:
    """Tables made without the MySQL variants drift: BLOB, TEXT and ``DATETIME`` without
    microseconds (the last only through ``compare_type``; Alembic alone misses fsp)."""
    assert database_backend(database_url) == "mysql"
    generic = MetaData(naming_convention=metadata.naming_convention)
    expected = set()
    for table in metadata.sorted_tables:
        copy = table.to_metadata(generic)
        for column in copy.columns:
            for kind in (DateTime, Text, LargeBinary):
                declared = column.type.compile(dialect=engine.dialect)
                if isinstance(column.type, kind) and declared != kind().compile(
                        dialect=engine.dialect):  # a MySQL variant: made generic here
                    column.type = kind()
                    expected.add((table.name, column.name))
    generic.create_all(engine)

    assert modified_columns(drift(engine, metadata)) == expected
    assert ("message_stub", "created_at") in expected


def test_indexes_and_constraints_are_named_as_in_tables(
        database_url: str, engine: Engine) -> None:
    migrations.upgrade(database_url)
    inspector = inspect(engine)
    for table in metadata.sorted_tables:
        indexes = {index["name"]: index["column_names"]
                   for index in inspector.get_indexes(table.name)}
        assert indexes == {index.name: [column.name for column in index.columns]
                           for index in table.indexes
                           if applies_to(index, engine.dialect.name)}
        checks = {check["name"] for check in inspector.get_check_constraints(table.name)}
        assert checks == {constraint.name for constraint in table.constraints
                          if isinstance(constraint, CheckConstraint)}
        assert inspector.get_unique_constraints(table.name) == []
        primary_key = inspector.get_pk_constraint(table.name)
        assert primary_key["constrained_columns"] == [column.name
                                                      for column in table.primary_key]
        if database_backend(database_url) != "mysql":  # MySQL names every primary key PRIMARY
            assert primary_key["name"] == table.primary_key.name == f"pk_{table.name}"
    assert "ck_message_stub_status" in {c.name for c in message_stub.constraints}


def test_the_claim_index_suits_the_database(database_url: str, engine: Engine) -> None:
    """A partial index on the unpublished stubs where the database has partial indexes, the
    three-column one on MySQL/MariaDB; the relay's claim query uses it."""
    migrations.upgrade(database_url)
    backend = database_backend(database_url)
    expected = "ix_message_stub_status_published_at_next_resend_at" if backend == "mysql" \
        else "ix_message_stub_unpublished"
    assert CLAIM_INDEXES & index_names(engine) == {expected}
    if backend == "postgresql":
        with engine.connect() as connection:
            definition = connection.execute(text(
                "SELECT indexdef FROM pg_indexes WHERE indexname = :name"),
                {"name": expected}).scalar_one()
        assert "WHERE" in definition and "published_at IS NULL" in definition
    elif backend == "sqlite":
        with engine.connect() as connection:
            definition = connection.execute(text(
                "SELECT sql FROM sqlite_master WHERE name = :name"), {"name": expected}
            ).scalar_one()
        assert "WHERE status = 'unconfirmed' AND published_at IS NULL" in definition


def test_defaults_checks_and_microseconds(database_url: str, engine: Engine) -> None:
    migrations.upgrade(database_url)
    created_at = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901)
    body = bytes(range(256)) * 300  # larger than MySQL's BLOB (64 KiB)
    row = {"message_id": "m-1", "topic": "orders", "content": body,
           "created_at": created_at, "updated_at": created_at}
    with engine.begin() as connection:
        connection.execute(insert(message_stub).values(**row))
        stored = connection.execute(select(message_stub)).one()
    assert (stored.status, stored.send_count) == ("unconfirmed", 0)
    assert stored.created_at == created_at
    assert stored.content == body

    with pytest.raises(DBAPIError), engine.begin() as connection:
        connection.execute(insert(message_stub).values(**{**row, "message_id": "m-2",
                                                         "status": "bogus"}))
    with pytest.raises(DBAPIError), engine.begin() as connection:
        connection.execute(insert(message_stub).values(**{**row, "message_id": "m-3",
                                                         "send_count": -1}))


def test_autogenerate_writes_an_empty_revision(database_url: str, tmp_path: Path) -> None:
    """``env.py`` and ``script.py.mako`` as Alembic uses them: at head, autogenerate finds
    nothing and renders a revision that compiles."""
    migrations.upgrade(database_url)
    config = migrations.make_config(database_url)
    config.set_main_option("path_separator", "newline")
    config.set_main_option("version_locations", f"{SCRIPT_LOCATION / 'versions'}\n{tmp_path}")

    script = command.revision(config, message="probe", autogenerate=True, rev_id="0099",
                              version_path=str(tmp_path))

    source = Path(script.path).read_text()
    compile(source, script.path, "exec")
    assert Path(script.path).name == "0099_probe.py"
    assert "down_revision = '0006'" in source
    assert "op." not in source


def test_script_template_ships_with_the_package() -> None:
    assert (SCRIPT_LOCATION / "script.py.mako").is_file()
    assert (SCRIPT_LOCATION / "env.py").is_file()


# --- postbox db -------------------------------------------------------------------------------

def test_cli_upgrade_current_downgrade(database_url: str, engine: Engine) -> None:
    engine.connect().close()  # an existing, empty database (SQLite: the file exists)
    before = run_json("db", "current", "--db", database_url, env=NO_ENV)
    assert (before["current"], before["head"], before["is_head"]) == (None, "0006", False)

    upgraded = run_json("db", "upgrade", "--db", database_url, env=NO_ENV)
    assert (upgraded["from"], upgraded["to"], upgraded["is_head"]) == (None, "0006", True)
    assert table_names(engine) >= OUTBOX_TABLES

    after = run_json("db", "current", "--db", database_url, env=NO_ENV)
    assert (after["current"], after["is_head"]) == ("0006", True)
    human = run("db", "current", "--db", database_url, env=NO_ENV)
    assert human.exit_code == 0, human.stderr
    assert "0006 (head)" in human.stdout

    downgraded = run_json("db", "downgrade", "--db", database_url, env=NO_ENV)
    assert (downgraded["from"], downgraded["to"]) == ("0006", "0005")
    assert "message_group" not in stub_columns(engine)
    downgraded = run_json("db", "downgrade", "--db", database_url, env=NO_ENV)
    assert (downgraded["from"], downgraded["to"]) == ("0005", "0004")
    assert CLAIM_INDEXES.isdisjoint(index_names(engine))
    downgraded = run_json("db", "downgrade", "--db", database_url, env=NO_ENV)
    assert (downgraded["from"], downgraded["to"]) == ("0004", "0003")
    assert "console_audit" not in table_names(engine)
    downgraded = run_json("db", "downgrade", "--db", database_url, env=NO_ENV)
    assert (downgraded["from"], downgraded["to"]) == ("0003", "0002")
    assert "message_resend" not in table_names(engine)
    to_base = run_json("db", "downgrade", "base", "--db", database_url, env=NO_ENV)
    assert (to_base["from"], to_base["to"]) == ("0002", None)
    assert not OUTBOX_TABLES & table_names(engine)


def test_cli_human_output_and_env_var(database_url: str) -> None:
    env = {"POSTBOX_DATABASE_URL": database_url}
    result = run("db", "upgrade", env=env)
    assert result.exit_code == 0, result.stderr
    assert "upgraded from <base> to 0006 (head)" in result.stdout
    again = run("db", "upgrade", env=env)
    assert "already at 0006 (head)" in again.stdout
    down = run("db", "downgrade", "base", env=env)
    assert "downgraded from 0006 (head) to <base>" in down.stdout


def test_cli_default_database_creates_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    document = run_json("db", "upgrade", env=NO_ENV)
    assert document["database"] == "sqlite:///.postbox/app.db"
    assert (tmp_path / ".postbox" / "app.db").is_file()


def test_cli_downgrade_of_an_empty_database_is_an_error(database_url: str,
                                                        engine: Engine) -> None:
    engine.connect().close()
    result = run("db", "downgrade", "--db", database_url, env=NO_ENV)
    assert_one_error_line(result, "nothing to downgrade")


def test_cli_unknown_revision_is_an_error(database_url: str) -> None:
    result = run("db", "upgrade", "bogus", "--db", database_url, env=NO_ENV)
    assert_one_error_line(result, "bogus")


@pytest.mark.parametrize("command_args", [["upgrade"], ["downgrade"], ["current"],
                                          ["current", "--json"]])
def test_cli_unreachable_database_is_one_error_line(command_args: list[str]) -> None:
    result = run("db", *command_args, "--db", UNREACHABLE_URL, env=NO_ENV)
    assert_one_error_line(result, "127.0.0.1", "Connection refused")


@pytest.mark.parametrize(("url", "fragment"), [("nonsense", "bad database URL"),
                                               ("nodialect://x", "nodialect")])
def test_cli_bad_url_is_one_error_line(url: str, fragment: str) -> None:
    result = run("db", "current", "--db", url, env=NO_ENV)
    assert_one_error_line(result, fragment)


def test_db_help_lists_every_command() -> None:
    result = run("db", "--help", env=NO_ENV)
    assert result.exit_code == 0, result.stderr
    for name in ("upgrade", "downgrade", "current"):
        assert f" {name} " in result.stdout


@pytest.mark.parametrize("command_args", [["current"], ["current", "--json"], ["downgrade"],
                                          ["downgrade", "base"]])
def test_cli_never_creates_a_missing_sqlite_database_to_inspect_it(
        tmp_path: Path, command_args: list[str]) -> None:
    missing = tmp_path / "data" / "app.db"
    result = run("db", *command_args, "--db", f"sqlite:///{missing}", env=NO_ENV)
    assert_one_error_line(result, "no database at", str(missing), "postbox db upgrade")
    assert not missing.exists() and not missing.parent.exists()
    result = run("outbox", "stats", "--db", f"sqlite:///{missing}", env=NO_ENV)
    assert_one_error_line(result, "no database at")
    assert not missing.exists()


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_cli_driverless_postgres_urls_use_psycopg(scheme: str) -> None:
    """Formerly a bare NoSuchModuleError (postgres://) or a missing psycopg2 (postgresql://):
    now they reach the server through psycopg 3 (here: a closed port)."""
    result = run("db", "current", "--db", f"{scheme}://postgres@127.0.0.1:1/x", env=NO_ENV)
    assert_one_error_line(result, "postgresql+psycopg://", "Connection refused")


@pytest.mark.parametrize(("url", "fragment"), [
    ("postgresql+psycopg2://u@h/x", "No module named 'psycopg2'"),
    ("oracle+nodriver://u@h/x", "Can't load plugin"),
])
def test_cli_a_url_without_its_driver_names_the_forms_that_work(url: str, fragment: str) -> None:
    result = run("db", "current", "--db", url, env=NO_ENV)
    assert_one_error_line(result, fragment, "postgresql+psycopg://user:pass@host/db",
                          "mysql+pymysql://")


def test_cli_json_is_one_document(database_url: str) -> None:
    result = run("db", "upgrade", "--db", database_url, "--json", env=NO_ENV)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["to"] == "0006"
