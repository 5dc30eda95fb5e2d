"""``bench.outbox_scale_bench``'s quick profile on PostgreSQL, in a database of its own: every
phase runs and the bench's own invariants hold (each stub published exactly once by four
relays, claims take what they ask for, cleanup deletes, index sizes are reported)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from bench import outbox_scale_bench as bench

SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432"
MARIADB_SERVER_URL = "mysql+pymysql://root@127.0.0.1:3306"


def database_for_the_test(server_url: str, admin_database: str, drop_options: str = ""
                          ) -> Iterator[str]:
    """A database created on ``server_url`` for one test, dropped after it (skipped when the
    server does not answer; under ``CI=true`` a skip fails the run)."""
    name = f"postbox_scale_{os.getpid()}"
    admin = create_engine(f"{server_url}/{admin_database}", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name}"))
            connection.execute(text(f"CREATE DATABASE {name}"))
    except OperationalError as error:
        admin.dispose()
        pytest.skip(f"no database server at {server_url}: {error.orig}")
    try:
        yield f"{server_url}/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name}{drop_options}"))
        admin.dispose()


@pytest.fixture
def scale_database() -> Iterator[str]:
    """A PostgreSQL database of this test's own."""
    yield from database_for_the_test(SERVER_URL, "postgres", " WITH (FORCE)")


@pytest.fixture
def mariadb_scale_database() -> Iterator[str]:
    """A MariaDB database of this test's own (with LOAD DATA LOCAL, which the load uses)."""
    for url in database_for_the_test(MARIADB_SERVER_URL, "test"):
        yield f"{url}?local_infile=1"


def test_quick_profile_on_postgresql(scale_database: str) -> None:
    args = bench.parse_args(["--quick", "--sizes", "2k", "--no-mariadb",
                             "--postgres", scale_database, "--cleanup-batches", "500"])
    report = bench.run(args)

    [result] = report["results"]
    assert (result["database"], result["size"]) == ("postgresql", 2_000)
    assert result["claims_ms"]["n"] == args.claims
    assert result["relay"]["stubs_per_s"] > 0
    four = result["four_relays"]
    assert (four["published"], four["published_twice"]) == (args.relay_stubs, 0)
    assert sum(four["per_relay"]) == args.relay_stubs
    churn = result["churn"]
    assert churn["inserted"] == 2_000 // (7 * 24) * 24
    assert churn["deleted"] > 0
    assert "ix_message_stub_unpublished" in churn["after"]["bytes"]
    assert set(churn["growth"]) == set(churn["before"]["bytes"])
    [cleanup] = result["cleanup"]
    assert cleanup["deleted"] > 0 and cleanup["producers"] == "processes"
    assert cleanup["producers_before_ms"]["n"] > 0  # the producer processes' timings came back


def test_cleanup_alone_against_its_key_list_baseline(scale_database: str) -> None:
    args = bench.parse_args(["--quick", "--sizes", "2k", "--no-mariadb", "--phases", "cleanup",
                             "--cleanup-baseline", "--postgres", scale_database,
                             "--cleanup-batches", "100", "--producer-threads"])
    report = bench.run(args)

    [result] = report["results"]
    assert set(result) == {"database", "size", "load", "cleanup"}  # no other phase ran
    product, baseline = result["cleanup"]
    assert (product["how"], baseline["how"]) == ("product", "key lists")
    assert product["producers"] == "threads" and product["producers_before_ms"]["n"] > 0
    # the first run deletes the stubs confirmed in the table's first two days, the
    # baseline those of the third (history spread evenly over seven days, 95 % confirmed)
    assert product["deleted"] > baseline["deleted"] > 0


def test_unknown_phase_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--phases", "cleanup,vacuum"])


def io_capacity(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            value = connection.execute(text("SELECT @@GLOBAL.innodb_io_capacity")).scalar_one()
            return int(value)
    finally:
        engine.dispose()


def test_mariadb_server_variables_hold_for_the_run_and_are_put_back(mariadb_scale_database):
    """Also with two cleanup workers (``CleanupPolicy.workers``)."""
    former = io_capacity(mariadb_scale_database)
    wanted = former + 100
    args = bench.parse_args(["--quick", "--sizes", "2k", "--no-postgres", "--phases", "cleanup",
                             "--mariadb", mariadb_scale_database, "--cleanup-batches", "500",
                             "--mariadb-set", f"innodb_io_capacity={wanted}",
                             "--cleanup-workers", "2"])
    report = bench.run(args)

    [result] = report["results"]
    assert result["mariadb_set"] == {"innodb_io_capacity": str(wanted)}
    [cleanup] = result["cleanup"]
    assert cleanup["deleted"] > 0 and cleanup["producers"] == "processes"
    assert cleanup["workers"] == 2
    assert io_capacity(mariadb_scale_database) == former


def test_a_server_variable_must_be_a_name_and_a_number() -> None:
    for wrong in ("innodb_io_capacity", "x=1; DROP TABLE t", "a b=3"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--mariadb-set", wrong])
