"""The idempotency middleware's Prometheus counters carry the consumer group: two groups
handling the same messages are counted apart in a real scrape (processed, duplicates, Redis
fallbacks), and each group of an ``idempotent=True`` handler is there from the first scrape."""

from __future__ import annotations

from sqlalchemy import Column, MetaData, String, Table, insert

from postbox import outbox
from postbox.framework import App
from postbox.framework.testing import InlineRunner
from tests.observability.scrape import Scrape, scrape
from tests.support.services import free_port

effects = Table("group_effects", MetaData(),
                Column("consumer_group", String(64), primary_key=True),
                Column("message_id", String(128), primary_key=True))
GROUPS = ("billing", "shipping")


def _two_groups(app: App) -> None:
    effects.create(outbox.database_engine(app), checkfirst=True)
    for group in GROUPS:
        @app.handler(topic="orders", consumer_group=group, consume_from="first",
                     idempotent=True)
        def handle(message, session, group: str = group) -> None:
            session.execute(insert(effects).values(consumer_group=group,
                                                   message_id=message.msg_id))


def _scrape(app: App) -> Scrape:
    return scrape(app.metrics_server(0).url)


def test_each_group_is_counted_apart(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    _two_groups(app)
    app.start(threads=False)
    before = _scrape(app)
    for group in GROUPS:  # known from the start, at zero
        assert before.value("postbox_idempotency_processed_total", group=group) == 0
    for number in range(3):
        app.producer.send("orders", b"order", unique_key=f"order-{number}")
    app.producer.send("orders", b"order", unique_key="order-0")  # one duplicate
    InlineRunner(app).run_until_idle(advance_clock=True)

    after = _scrape(app)
    for group in GROUPS:
        assert after.value("postbox_idempotency_processed_total", group=group) == 3
        assert after.total("postbox_idempotency_duplicates_total", group=group) == 1
        assert after.value("postbox_idempotency_database_errors_total", group=group) == 0
    assert after.total("postbox_idempotency_processed_total") == 6


def test_redis_fallbacks_are_counted_per_group(make_app, fake_clock):
    app = make_app(clock=fake_clock, redis=f"redis://127.0.0.1:{free_port()}/0")  # no Redis
    _two_groups(app)
    app.start(threads=False)
    app.producer.send("orders", b"order", unique_key="order-1")
    app.producer.send("orders", b"order", unique_key="order-2")
    InlineRunner(app).run_until_idle(advance_clock=True)

    result = _scrape(app)
    for group in GROUPS:
        assert result.value("postbox_idempotency_database_fallbacks_total", group=group,
                            reason="redis_unavailable") == 2
        assert result.value("postbox_idempotency_duplicates_total", group=group,
                            decided_by="redis") == 0
