"""The one Spark session of a test run, for every test that runs Spark in this process.

Spark's start-up costs seconds and PySpark keeps its Java gateway (and the accumulator server
thread beside it) for the whole process, so a session fixture starts it once, on loopback, and
stops it at the end. Tests whose code starts Spark itself in-process (the demo, ``postbox
reconcile`` through the CLI runner) request it too: their ``getOrCreate`` then finds this
session, and the threads Spark keeps belong to the session, not to the test (the thread fence).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The shared local Spark session (two cores)."""
    from postbox.spark_reconcile.session import (
        spark_session,  # pyspark is imported only when needed
    )

    session = spark_session("local[2]")
    yield session
    session.stop()
