"""One configuration story: ``App.from_env()`` reads the ``POSTBOX_*`` variables the command line
and the Celery worker read, with the same defaults (``framework.environment``), and
``docs/configuration.md`` shows the one table of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sqlalchemy import inspect

from postbox import outbox
from postbox.framework import App, environment
from postbox.framework.contrib.celery import celery_broker_url
from postbox.outbox import database_engine
from tests.cli.cli_support import run_json

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("storage_engine", "network", "broker_node", "framework", "outbox", "idempotency",
            "migrations", "spark_reconcile", "examples", "postbox")
NOT_VARIABLES = {"POSTBOX_SET_ASIDE": "a topic name (storage_engine.store.repair)",
                 "POSTBOX_PRODUCER": "a producer group name (network.client)"}


def test_from_env_reads_store_database_and_redis(tmp_path):
    env = {"POSTBOX_STORE": (tmp_path / "store").as_uri(),
           "POSTBOX_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
           "POSTBOX_REDIS_URL": "redis://127.0.0.1:6379/5", "UNRELATED": "x"}
    app = App.from_env(env)
    assert (app.store_url, app.database_url, app.redis_url) == (
        env["POSTBOX_STORE"], env["POSTBOX_DATABASE_URL"], env["POSTBOX_REDIS_URL"])
    assert not app.running and not (tmp_path / "store").exists()  # nothing opened


def test_unset_or_empty_variables_mean_the_command_lines_defaults():
    for env in ({}, {"POSTBOX_STORE": "", "POSTBOX_DATABASE_URL": "", "POSTBOX_REDIS_URL": ""}):
        app = App.from_env(env)
        assert (app.store_url, app.database_url, app.redis_url) == (
            ".postbox/store", "sqlite:///.postbox/app.db", None)


def test_arguments_win_over_the_variables(tmp_path, open_broker):
    env = {"POSTBOX_STORE": str(tmp_path / "other"), "POSTBOX_REDIS_URL": "redis://h/1"}
    app = App.from_env(env, store_url=str(tmp_path / "store"), redis_url=None)
    assert (app.store_url, app.redis_url) == (str(tmp_path / "store"), None)
    broker = open_broker()
    assert App.from_env(env, broker=broker).client is broker


def test_the_command_line_reaches_what_from_env_uses(tmp_path):
    """``postbox db upgrade`` and ``postbox store stats`` with no ``--db``/``--store`` work on
    the database and store ``App.from_env()`` uses under the same variables."""
    env = {"POSTBOX_STORE": str(tmp_path / "store"),
           "POSTBOX_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}"}
    run_json("db", "upgrade", env=env)
    app = App.from_env(env)
    try:
        assert {"message_stub", "outbox_task"} <= set(
            inspect(database_engine(app)).get_table_names())
        with database_engine(app).begin() as connection:
            outbox.send(connection, "orders", b"paid")
        app.producer.send("orders", b"paid")
    finally:
        app.stop()
    stats = run_json("store", "stats", env=env)
    assert stats["root_dir"] == env["POSTBOX_STORE"] and stats["commit_log"]["max_position"] > 0


def test_celery_reads_the_same_redis_variable(monkeypatch):
    monkeypatch.setenv("POSTBOX_REDIS_URL", "redis://127.0.0.1:6379/7")
    assert celery_broker_url() == "redis://127.0.0.1:6379/7" == App.from_env().redis_url


def test_the_docs_show_the_table():
    assert environment.markdown_table() in (ROOT / "docs" / "configuration.md").read_text()


def postbox_names_in_code() -> dict[str, str]:
    """Every string constant in the project's packages that is exactly a ``POSTBOX_*`` name,
    with the file it is in."""
    names: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                        re.fullmatch(r"POSTBOX_[A-Z0-9_]+", node.value):
                    names.setdefault(node.value, str(path.relative_to(ROOT)))
    return names


def test_every_postbox_variable_a_program_reads_is_in_the_table():
    table = {variable.name for variable in environment.ENV_VARS}
    unlisted = {name: where for name, where in postbox_names_in_code().items()
                if name not in table and name not in NOT_VARIABLES}
    assert unlisted == {}
