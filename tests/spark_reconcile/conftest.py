"""One Spark session for the whole test session (start-up costs ~5 s), on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_reconcile.session import spark_session

SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
"""Debian's SQLite JDBC driver (package libxerial-sqlite-jdbc-java; CI installs it)."""


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_session("local[2]")
    yield session
    session.stop()
