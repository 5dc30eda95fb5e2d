"""What a misconfigured database says: missing outbox tables name ``postbox db upgrade`` (in
``outbox.send`` and in the worker's tasks), and a database URL whose dialect is unknown or whose
driver is not installed names the URL forms that work and the extra that installs the driver."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from postbox import outbox
from postbox.framework import App, ConfigurationError
from postbox.outbox import DatabaseDriverError, MissingTablesError, OutboxWorker
from postbox.outbox.database import URL_FORMS, create_database_engine

ROOT = Path(__file__).resolve().parents[2]


def test_send_without_the_tables_says_to_run_db_upgrade(database_url):
    engine = create_database_engine(database_url)
    try:
        with pytest.raises(MissingTablesError, match=r"outbox\.send: .*postbox db upgrade"), \
                engine.begin() as connection:
            outbox.send(connection, "orders", b"paid")
    finally:
        engine.dispose()


@pytest.mark.parametrize("task", ["relay_pending", "resend_due", "cleanup"])
def test_worker_tasks_without_the_tables_say_to_run_db_upgrade(tmp_path, database_url, task):
    app = App(tmp_path / "store", database_url=database_url)
    try:
        worker = OutboxWorker(app)
        with pytest.raises(MissingTablesError, match=f"outbox task {task}: .*postbox db upgrade"):
            getattr(worker, task)()
    finally:
        app.stop()


@pytest.mark.parametrize("url", ["oracle+oracledb://scott:tiger@db/orders", "nosuch://x/y"])
def test_an_unsupported_url_names_the_forms_that_work(url):
    with pytest.raises(DatabaseDriverError) as refused:
        create_database_engine(url)
    assert URL_FORMS in str(refused.value)
    assert "tiger" not in str(refused.value)  # the password is hidden
    assert isinstance(refused.value, ConfigurationError)


def environment_without(tmp_path: Path, *hidden: str) -> dict[str, str]:
    """Environment variables for ``python -S``: this worktree laid out as installed (the
    ``postbox`` namespace tree: ``-S`` skips the editable install's import hook), then every
    installed package except those whose names start with ``hidden`` (a real install missing
    those drivers)."""
    tree = tmp_path / "namespace"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "namespace_tree.py"), str(tree)],
                   check=True, capture_output=True, timeout=60)
    site = Path(sysconfig.get_paths()["purelib"])
    packages = tmp_path / "site-packages"
    packages.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith(hidden) and not entry.name.endswith(".pth"):
            (packages / entry.name).symlink_to(entry)
    return {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{packages}"}


@pytest.mark.parametrize(("url", "driver", "extra"), [
    ("postgresql://app:secret@db/orders", "psycopg", "postgres"),
    ("mysql://app:secret@db/orders", "pymysql", "mysql"),
])
def test_a_missing_driver_names_the_extra_to_install(tmp_path, url, driver, extra):
    program = ("from postbox.outbox.database import create_database_engine\n"
               f"create_database_engine({url!r})\n")
    result = subprocess.run([sys.executable, "-S", "-c", program], capture_output=True,
                            text=True, env=environment_without(tmp_path, driver), timeout=120,
                            check=False, cwd=tmp_path)  # not the checkout: its postbox/ first
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("postbox.outbox.errors.DatabaseDriverError: cannot use database URL"), \
        result.stderr
    assert f"pip install 'postbox[{extra}]'" in last and URL_FORMS in last
    assert "secret" not in last
