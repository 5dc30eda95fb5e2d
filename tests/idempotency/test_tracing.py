"""Tracing around idempotent handlers: the span covers the idempotency checks, and a duplicate
the middleware skipped says so."""

from __future__ import annotations

from sqlalchemy import insert

from postbox import outbox
from postbox.framework.testing import InlineRunner
from tests.support.idempotent_consumer import ledger
from tests.support.tracing import parent_id, spans  # noqa: F401  (fixture)


def test_duplicates_are_skipped_spans_of_the_same_trace(make_app, fake_clock,
                                                        spans):  # noqa: F811
    app = make_app(clock=fake_clock, tracing=spans.tracing)
    calls: list[str] = []

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    def bill(message, session) -> None:
        calls.append(message.msg_id)
        session.execute(insert(ledger).values(message_id=message.msg_id, pid="1"))

    with spans.tracer.start_as_current_span("checkout") as checkout:
        with outbox.database_engine(app).begin() as connection:
            message_id = outbox.send(connection, "orders", b"order", tags="paid")
        for _ in range(3):  # the relay's publish, then two resends of the same message
            app.producer.send("orders", b"order", tags="paid", unique_key=message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)

    processes = spans.named("process orders")
    assert calls == [message_id] and len(processes) == 3
    assert [bool(span.attributes.get("postbox.skipped")) for span in processes] == [
        False, True, True]
    assert {span.context.trace_id for span in processes} == {checkout.context.trace_id}
    publishes = {span.context.span_id for span in spans.named("send orders")}
    assert {parent_id(span) for span in processes} == publishes
