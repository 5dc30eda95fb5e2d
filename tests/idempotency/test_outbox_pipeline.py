"""The outbox and an idempotent handler end to end: stubs written in business transactions are
relayed through the broker, duplicates and handler failures included, and each takes effect
exactly once with every stub confirmed."""

from __future__ import annotations

import threading

from sqlalchemy import insert, select

from postbox import outbox
from postbox.framework import ConsumerOptions
from tests.idempotency.conftest import count_rows
from tests.idempotency.process_support import stub_counts
from tests.support.idempotent_consumer import business, ledger
from tests.support.polling import wait_until

MESSAGES = 40
FAST = ConsumerOptions(long_polling_ms=200, rebalance_interval_ms=200, persist_interval_ms=100)


def test_outbox_and_idempotent_handler_take_effect_exactly_once(make_app):
    app = make_app(consumer_options=FAST)
    box = outbox.Outbox(app)
    business.create_all(box.engine)
    calls: list[str] = []
    lock = threading.Lock()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    def bill(message, session) -> None:
        session.execute(insert(ledger).values(message_id=message.msg_id, pid="1"))
        with lock:
            calls.append(message.msg_id)
            first_try = calls.count(message.msg_id) == 1
        if first_try and len(calls) % 5 == 0:
            raise RuntimeError("injected failure: rolled back, retried through %RETRY%")

    app.start()
    try:
        with box.session.begin() as session:
            ids = [outbox.send(session, "orders", {"order": index}, tags="paid")
                   for index in range(MESSAGES)]
        for message_id in ids[:10]:  # redelivered copies, as after a producer retry
            app.producer.send("orders", b"copy", tags="paid", unique_key=message_id)
        wait_until(lambda: stub_counts(box.engine).get("confirmed") == MESSAGES
                   and count_rows(box.engine, outbox.message_log) == 0, 60,
                   "every stub confirmed and the message log empty")
    finally:
        app.stop()

    with box.engine.connect() as connection:
        written = connection.execute(select(ledger.c.message_id)).scalars().all()
    assert sorted(written) == sorted(ids)  # each effect exactly once
    assert set(calls) == set(ids)
