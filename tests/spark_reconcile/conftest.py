"""Spark test settings (the session-wide ``spark`` fixture is in ``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
"""Debian's SQLite JDBC driver (package libxerial-sqlite-jdbc-java; CI installs it)."""

