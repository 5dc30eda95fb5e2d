"""One trace from the business transaction through the outbox relay to the handler."""

from __future__ import annotations

import asyncio
import json
import threading

from opentelemetry.trace import SpanKind
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncSession

from postbox import outbox
from postbox.framework import App, ConsumerOptions
from postbox.framework.tracing import TRACEPARENT
from postbox.outbox import Outbox, RelayOptions, create_async_database_engine
from tests.outbox.conftest import add_order, stub_row
from tests.support.tracing import parent_id, spans, traceparent_of  # noqa: F401  (fixture)

FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)


def test_business_span_is_the_parent_of_the_relays_publish_and_the_handler(
        broker, engine: Engine, migrated_database_url: str, spans):  # noqa: F811
    app = App(broker=broker, database_url=migrated_database_url, consumer_options=FAST,
              tracing=spans.tracing)
    box = Outbox(app, engine=engine, options=RelayOptions(poll_interval_ms=50))
    received: dict[str, str] = {}
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def bill(message):
        received.update(message.properties)
        handled.set()

    app.start()
    try:
        with spans.tracer.start_as_current_span("POST /orders") as request, \
                box.session.begin() as session:
            add_order(session, 1)
            message_id = outbox.send(session, "orders", {"order": 1})
        assert handled.wait(30)
    finally:
        app.stop()

    [publish] = spans.named("send orders")
    [process] = spans.named("process orders")
    assert publish.kind is SpanKind.PRODUCER
    assert publish.context.trace_id == process.context.trace_id == request.context.trace_id
    assert parent_id(publish) == request.context.span_id  # made later, in the relay thread
    assert parent_id(process) == publish.context.span_id
    assert publish.attributes["messaging.message.id"] == message_id
    assert process.attributes["messaging.message.id"] == message_id
    stored = json.loads(stub_row(engine, message_id)["properties"])
    assert stored == {TRACEPARENT: traceparent_of(request)}  # the stub keeps the business span
    assert received[TRACEPARENT] == traceparent_of(publish)  # the message names the publish


def test_send_without_a_span_or_with_the_callers_traceparent(engine: Engine):
    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with engine.begin() as connection:
        plain = outbox.send(connection, "orders", b"a")
        own = outbox.send(connection, "orders", b"b", properties={TRACEPARENT: upstream})
    assert stub_row(engine, plain)["properties"] is None  # nothing current: nothing added
    assert json.loads(stub_row(engine, own)["properties"]) == {TRACEPARENT: upstream}


def test_a_callers_traceparent_survives_an_active_span(engine: Engine, spans):  # noqa: F811
    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with spans.tracer.start_as_current_span("job"), engine.begin() as connection:
        own = outbox.send(connection, "orders", b"b", properties={TRACEPARENT: upstream,
                                                                  "source": "shop"})
    assert json.loads(stub_row(engine, own)["properties"]) == {TRACEPARENT: upstream,
                                                               "source": "shop"}


def test_an_async_send_stores_the_context_of_the_coroutines_span(engine: Engine,
                                                                 migrated_database_url: str,
                                                                 spans):  # noqa: F811
    async def main() -> str:
        database = create_async_database_engine(migrated_database_url)
        try:
            with spans.tracer.start_as_current_span("POST /orders"):
                async with AsyncSession(database) as session, session.begin():
                    return await outbox.send(session, "orders", b"a")
        finally:
            await database.dispose()

    message_id = asyncio.run(main())
    [request] = spans.named("POST /orders")
    assert json.loads(stub_row(engine, message_id)["properties"]) == {
        TRACEPARENT: traceparent_of(request)}
