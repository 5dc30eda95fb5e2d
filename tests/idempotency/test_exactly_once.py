"""Acceptance: exactly-once effect under concurrency. Two consumer processes of one group, 8
consume threads each, every message delivered three times to each process on purpose plus the
broker's redeliveries of the 20 % of handler calls that fail: each business row is written
exactly once, every stub ends confirmed, and no log row is left.

Embedded, a store belongs to one process, so each process embeds its own store and both receive
every message; over a remote transport both consume the one broker's queues. Either way the two
share the consumer group, the database and Redis, which is where exactly-once is decided.
"""

from __future__ import annotations

from sqlalchemy import select

from postbox import outbox
from tests.idempotency.conftest import count_rows
from tests.idempotency.process_support import (
    publish_copies,
    send_stubs,
    spawn_consumer,
    start_together,
    stop_consumer,
    stub_counts,
)
from tests.support.idempotent_consumer import business, ledger
from tests.support.polling import wait_until

MESSAGES = 300
COPIES = 3


def test_two_processes_eight_threads_duplicates_and_failures(tmp_path, store,
                                                             migrated_database_url, redis_url):
    engine = outbox.create_database_engine(migrated_database_url)
    business.create_all(engine)
    ids = send_stubs(engine, MESSAGES)
    roots = [store.url("store-a"), store.url("store-b")] if not store.remote else \
        [store.url()] * 2
    for root in sorted(set(roots)):
        publish_copies(root, ids, COPIES)

    processes = [spawn_consumer(root, migrated_database_url, redis_url, "--fail-rate", "0.2",
                                "--seed", str(seed), "--start-on-go")
                 for seed, root in enumerate(roots)]
    try:
        start_together(processes)
        wait_until(lambda: stub_counts(engine).get("confirmed") == MESSAGES
                   and count_rows(engine, outbox.message_log) == 0, 180,
                   "every stub confirmed and the message log empty")
    finally:
        for process in processes:
            stop_consumer(process)

    with engine.connect() as connection:
        written = connection.execute(select(ledger.c.message_id)).scalars().all()
        pids = set(connection.execute(select(ledger.c.pid)).scalars())
    assert sorted(written) == sorted(ids)  # each business row exactly once
    assert len(pids) == 2  # both processes did part of the work
    assert stub_counts(engine) == {"confirmed": MESSAGES}
    assert count_rows(engine, outbox.message_log) == 0
    assert count_rows(engine, outbox.message_processed) == MESSAGES
    engine.dispose()
