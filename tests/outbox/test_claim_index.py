"""The relay's claim reads its own index: the partial index on the unpublished stubs
(SQLite, PostgreSQL), the three-column one on MySQL/MariaDB, so that a claim's cost does not
grow with the published stubs waiting for their resend check."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, insert, select, text

from postbox.outbox import message_stub
from postbox.outbox.claims import MYSQL_CLAIM_HINT, lease_free, unpublished_due
from postbox.outbox.clock import utc_now
from tests.support.services import database_backend

stub = message_stub.c


def claim_candidates_plan(engine: Engine) -> str:
    """The query plan of the relay's claim candidates (the statement ``claim_stubs`` runs)."""
    now = utc_now()
    query = select(stub.message_id).where(unpublished_due(now, 5), lease_free(now)) \
        .order_by(stub.next_resend_at).limit(100) \
        .with_hint(message_stub, MYSQL_CLAIM_HINT, "mysql")  # as claim_stubs does there
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("SET LOCAL enable_seqscan = off"))
            return "\n".join(connection.execute(text(f"EXPLAIN {sql}")).scalars())
        if engine.dialect.name == "sqlite":
            return "\n".join(str(row[-1]) for row in connection.execute(
                text(f"EXPLAIN QUERY PLAN {sql}")))
        return "\n".join(str(row) for row in connection.execute(text(f"EXPLAIN {sql}")))


def fill(engine: Engine) -> None:
    """Stubs as a running outbox holds them: many published and awaiting their resend check
    (due), a few never published; then the planner's statistics."""
    now = utc_now()
    rows = [{"message_id": f"m-{n}", "topic": "orders", "content": b"x", "created_at": now,
             "updated_at": now, "next_resend_at": now - timedelta(seconds=n),
             "published_at": None if n % 50 == 0 else now} for n in range(500)]
    with engine.begin() as connection:
        connection.execute(insert(message_stub), rows)
    with engine.connect() as connection:
        statement = {"postgresql": "ANALYZE message_stub", "sqlite": "ANALYZE"}.get(
            engine.dialect.name, "ANALYZE TABLE message_stub")
        connection.execute(text(statement)).close()
        connection.commit()


def test_the_claim_reads_the_claim_index(engine: Engine, database_url: str) -> None:
    backend = database_backend(database_url)
    fill(engine)
    plan = claim_candidates_plan(engine)
    if backend == "mysql":
        assert "ix_message_stub_status_published_at_next_resend_at" in plan, plan
        assert "filesort" not in plan, plan
    else:  # PostgreSQL may sort a handful of rows rather than read them in order
        assert "ix_message_stub_unpublished" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


def test_the_claim_condition_spells_the_partial_index_condition() -> None:
    """The planner proves a partial index usable from the query's text: the status must be a
    literal there, not a bound parameter."""
    condition = unpublished_due(utc_now(), 5)
    rendered = str(condition.compile())
    assert "status = 'unconfirmed'" in rendered
    assert "published_at IS NULL" in rendered
