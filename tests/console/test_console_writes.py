"""The console's remaining write actions in a real browser, over the payments scenario: void an
unconfirmed stub with a reason, requeue a selection of dead letters and a whole failure class —
each checked in the database (the stub, the ``console_audit`` row) or the store (the copies in
the group's retry topic, the resend marks), not only on the page."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from sqlalchemy import create_engine, insert, select

from postbox.cli.common import StoreOptions, open_broker
from postbox.outbox.clock import utc_now
from postbox.outbox.tables import StubStatus, message_stub
from postbox.storage_engine.formats import PROPERTY_DLQ_ORIGIN_MESSAGE_ID
from postbox.storage_engine.formats.topic_names import retry_topic
from tests.console.browsing import assert_audited, sign_in, stubs
from tests.console.scenario import Prepared

pytestmark = [pytest.mark.timeout(900), pytest.mark.leaves_threads(
    "Playwright's sync API runs an asyncio loop for the module's browser, whose default "
    "executor keeps its worker threads (asyncio_N) until the browser closes")]
GROUP = "billing"
STUCK_ID = "C0FFEE00000000000000000000000001"
REASON = "customer cancelled the order by phone"


@dataclasses.dataclass(frozen=True)
class Requeued:
    """What the store says about the group's dead letters and their requeued copies."""

    offsets: list[int]
    marks: dict[int, int]
    copies: Counter


def requeued(prepared: Prepared) -> Requeued:
    """The group's dead-letter offsets, resend counts per offset, and retry-topic copies per
    dead letter (by the DLQ offset they were copied from)."""
    with open_broker(StoreOptions(prepared.store_dir)) as broker:
        letters = broker.dead_letters(GROUP, 0, 64)
        offset_of = {view.msg_id: view.queue_offset for view in letters}
        store = broker.store
        copies = Counter(offset_of[view.properties[PROPERTY_DLQ_ORIGIN_MESSAGE_ID]]
                         for queue_id in store.topics().get(retry_topic(GROUP), [])
                         for view in store.get_message("test", retry_topic(GROUP), queue_id, 0,
                                                       max_count=256).messages
                         if view.properties.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID) in offset_of)
        marks = {offset: mark.count for offset, mark in broker.dlq_resends.marks(GROUP).items()}
    return Requeued(sorted(offset_of.values()), marks, copies)


def add_unconfirmed_stub(prepared: Prepared, message_id: str) -> None:
    """A stub the relay could not publish yet."""
    engine = create_engine(prepared.database_url)
    now = utc_now()
    try:
        with engine.begin() as connection:
            connection.execute(insert(message_stub).values(
                message_id=message_id, topic="orders", content=b'{"order": "stuck"}',
                status=StubStatus.UNCONFIRMED.value, created_at=now, updated_at=now))
    finally:
        engine.dispose()


def test_void_a_stub_with_a_reason(page, prepared: Prepared) -> None:
    add_unconfirmed_stub(prepared, STUCK_ID)
    sign_in(page, "bob")
    page.goto("/outbox?status=unconfirmed")
    form = page.locator("form[action='/outbox/void']")
    form.locator(f"tr[data-id='{STUCK_ID}'] input.pick").check()
    form.locator("input[name=reason]").fill(REASON)
    form.locator("button", has_text="void selected").click()
    assert f"voided 1: {REASON}" in page.locator("#outcome").inner_text()
    assert STUCK_ID in stubs(prepared.database_url, StubStatus.VOID)
    engine = create_engine(prepared.database_url)
    try:
        with engine.connect() as connection:
            last_error = connection.execute(select(message_stub.c.last_error).where(
                message_stub.c.message_id == STUCK_ID)).scalar_one()
    finally:
        engine.dispose()
    assert last_error == f"voided by operator: {REASON}"
    row = assert_audited(prepared.database_url, "void-stubs", "bob@")
    assert STUCK_ID in row["target"] and REASON in row["outcome"]
    page.goto("/outbox")  # now among the void stubs that need manual handling
    assert REASON in page.locator(f"table.void tr[data-id='{STUCK_ID}']").inner_text()


def test_void_without_a_reason_is_refused(page, prepared: Prepared) -> None:
    unconfirmed = stubs(prepared.database_url, StubStatus.UNCONFIRMED)
    if not unconfirmed:
        add_unconfirmed_stub(prepared, STUCK_ID[:-1] + "2")
        unconfirmed = stubs(prepared.database_url, StubStatus.UNCONFIRMED)
    chosen = unconfirmed[0]
    sign_in(page, "bob")
    page.goto("/outbox?status=unconfirmed")
    form = page.locator("form[action='/outbox/void']")
    form.locator(f"tr[data-id='{chosen}'] input.pick").check()
    form.locator("button", has_text="void selected").click()
    assert "reason is required" in page.locator("#outcome").inner_text()
    assert chosen in stubs(prepared.database_url, StubStatus.UNCONFIRMED)


def test_requeue_a_selection_of_dead_letters(page, prepared: Prepared) -> None:
    before = requeued(prepared)
    chosen = [before.offsets[0], before.offsets[-1]]
    assert len(set(chosen)) == 2, before  # the scenario dead-letters three orders
    sign_in(page)
    page.goto(f"/dlq?group={GROUP}")
    for offset in chosen:
        page.locator(f".failure-class tr[data-offset='{offset}'] input.pick").check()
    page.locator(".failure-class button", has_text="requeue selected").click()
    assert "re-sent 2" in page.locator("#outcome").inner_text()
    after = requeued(prepared)
    for offset in before.offsets:
        grown = 1 if offset in chosen else 0
        assert after.copies[offset] == before.copies[offset] + grown, (offset, before, after)
        assert after.marks.get(offset, 0) == before.marks.get(offset, 0) + grown
    row = assert_audited(prepared.database_url, "requeue-dead-letters", "alice@")
    assert "re-sent 2" in row["outcome"]


def test_requeue_a_whole_failure_class(page, prepared: Prepared) -> None:
    before = requeued(prepared)
    sign_in(page)
    page.goto(f"/dlq?group={GROUP}")
    failure_class = page.locator(".failure-class").first
    fingerprint = failure_class.get_attribute("data-fingerprint")
    assert fingerprint and failure_class.locator("tr[data-offset]").count() == len(
        before.offsets)
    failure_class.locator("button", has_text="requeue this class").click()
    assert f"re-sent {len(before.offsets)}" in page.locator("#outcome").inner_text()
    after = requeued(prepared)
    assert all(after.copies[offset] == before.copies[offset] + 1
               and after.marks[offset] == before.marks.get(offset, 0) + 1
               for offset in before.offsets), (before, after)
    row = assert_audited(prepared.database_url, "requeue-dead-letters", "alice@")
    assert f"re-sent {len(before.offsets)}" in row["outcome"]
