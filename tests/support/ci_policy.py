"""What CI claims to test must run (a pytest plugin, loaded by ``tests/conftest.py``).

- Under ``CI=true`` a skipped test is reported as a failure that names the skip's reason: a
  missing service, browser, JDBC driver or live RocketMQ must not quietly shrink what CI checks.
  ``xfail`` is not a skip and is left alone.
- ``@pytest.mark.only_on_databases("postgresql", "mysql")`` marks a test that has nothing to check
  on other databases (a MySQL-only column type, a deadlock SQLite cannot have). It is deselected,
  not skipped, where the database under test (``POSTBOX_TEST_DATABASE_URL``, SQLite when unset)
  is another one; CI runs it in that database's pass.
"""

from __future__ import annotations

import os

import pytest

from tests.support.services import DATABASE_URL_ENV, database_backend


def ci_forbids_skips() -> bool:
    """True when running under CI (``CI=true``), where a skip fails the run."""
    return os.environ.get("CI", "").lower() == "true"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "only_on_databases(*backends): run only when the database under test is one "
                   "of these (sqlite, postgresql, mysql); deselected elsewhere")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = database_backend(os.environ.get(DATABASE_URL_ENV) or "sqlite://")
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("only_on_databases")
        (drop if marker is not None and backend not in marker.args else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and ci_forbids_skips()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true, where every test must run: {reason}\n"
                       "(install what it needs: scripts/services.sh starts the services)")
