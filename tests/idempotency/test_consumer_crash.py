"""Acceptance: a consumer process killed with SIGKILL in the middle of an idempotent handler.
After a restart the message is processed exactly once — promptly, although the dead attempt's
Redis mark is still there: the database, not the mark, decides."""

from __future__ import annotations

import os
import signal
import time

import redis
from sqlalchemy import select

from postbox import outbox
from postbox.idempotency import RedisGuard
from tests.idempotency.conftest import count_rows
from tests.idempotency.process_support import (
    publish_copies,
    send_stubs,
    start_consumer,
    stop_consumer,
    stub_counts,
)
from tests.support.idempotent_consumer import business, ledger
from tests.support.polling import wait_until

MESSAGES = 20


def test_kill_9_mid_handler_then_restart_processes_it_once(tmp_path, store,
                                                           migrated_database_url, redis_url):
    engine = outbox.create_database_engine(migrated_database_url)
    business.create_all(engine)
    ids = send_stubs(engine, MESSAGES)
    root = store.url()
    publish_copies(root, ids, 1)
    block_file = tmp_path / "blocked"

    first = start_consumer(root, migrated_database_url, redis_url, "--block-file",
                           str(block_file))
    wait_until(lambda: block_file.exists() and block_file.read_text(), 60,
               "the handler to block")
    blocked_id = block_file.read_text()
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    assert count_rows(engine, ledger) <= MESSAGES - 1
    with engine.connect() as connection:
        assert connection.execute(select(ledger.c.message_id).where(
            ledger.c.message_id == blocked_id)).first() is None  # its insert rolled back
    client = redis.Redis.from_url(redis_url)
    mark = RedisGuard(client).key("billing", blocked_id)
    assert client.pttl(mark) > 0  # the dead attempt's mark outlives it

    restarted_at = time.monotonic()
    second = start_consumer(root, migrated_database_url, redis_url)
    try:
        wait_until(lambda: stub_counts(engine).get("confirmed") == MESSAGES, 60,
                   "every stub confirmed after the restart")
    finally:
        stop_consumer(second)
    assert time.monotonic() - restarted_at < 30  # far sooner than the mark's 60 s TTL
    assert client.pttl(mark) > 0  # ... which was not what let it through

    with engine.connect() as connection:
        written = connection.execute(select(ledger.c.message_id)).scalars().all()
    assert sorted(written) == sorted(ids)
    assert count_rows(engine, outbox.message_log) == 0
    engine.dispose()
