"""The console in a real browser, over a real store, SQLite database, Redis and reconciliation
report made by the payments example: each page is opened (and photographed for the docs), one
order is followed from search to its stub, log rows and report entry, and every write action
is checked in the store and the database afterwards, not only on the page."""

from __future__ import annotations

import json

import pytest

from postbox.cli.common import StoreOptions, open_broker, open_store
from postbox.outbox.tables import StubStatus
from postbox.storage_engine.formats import PROPERTY_DLQ_ORIGIN_MESSAGE_ID
from postbox.storage_engine.formats.topic_names import retry_topic
from tests.console.browsing import assert_audited, shoot, sign_in, stubs
from tests.console.scenario import Prepared, publish_pending

pytestmark = [pytest.mark.timeout(900), pytest.mark.leaves_threads(
    "Playwright's sync API runs an asyncio loop for the module's browser, whose default "
    "executor keeps its worker threads (asyncio_N) until the browser closes")]
GROUP = "billing"
TOPIC = "orders"


def test_every_page_renders_and_refreshes_itself(page, prepared: Prepared) -> None:
    sign_in(page)  # the screenshots show the write actions too
    page.goto("/")
    assert page.locator("#alerts-open").inner_text().strip() == str(
        len(stubs(prepared.database_url, StubStatus.VOID)))
    assert "redis" in page.locator("section[data-source=redis]").inner_text()
    page.wait_for_function("document.getElementById('live').dataset.refreshed")
    shoot(page, "overview")
    page.goto("/topics")
    assert page.locator(f"tr[data-topic={TOPIC}]").count() >= 1
    shoot(page, "topics")
    page.goto(f"/groups?group={GROUP}")
    assert page.locator(f"table[data-group={GROUP}] tr[data-topic={TOPIC}]").count() >= 1
    shoot(page, "groups")
    page.goto(f"/dlq?group={GROUP}")
    assert page.locator(".failure-class").count() == 1  # every poison order fails alike
    assert page.locator(".failure-class tr[data-offset]").count() == 3
    shoot(page, "dead-letters")
    page.goto("/outbox")
    void_stubs = stubs(prepared.database_url, StubStatus.VOID)
    assert page.locator("table.void tr[data-id]").count() == len(void_stubs)
    shoot(page, "outbox")
    page.goto("/reports")
    assert page.locator("table.runs tr").count() == 2  # header + the one run
    assert page.locator("table.entries tr").count() > 1  # the dead-lettered orders
    page.frame_locator("iframe").locator("body").wait_for()
    shoot(page, "reconciliation")


def test_one_order_end_to_end(page, prepared: Prepared) -> None:
    message_id = stubs(prepared.database_url, StubStatus.CONFIRMED)[0]
    page.goto("/messages")
    page.select_option("select[name=by]", "id")
    page.fill("input[name=q]", message_id)
    page.click("#search button")
    shoot(page, "messages")
    page.locator("a.message-link").first.click()
    assert page.locator("#unique-key").inner_text() == message_id
    assert page.locator("#stub-status").inner_text() == "confirmed"
    assert GROUP in page.locator("table.message_processed").inner_text()
    assert page.locator("#report td.classification").first.inner_text() == "confirmed"
    body = page.locator("pre.body").first.inner_text()
    assert body.strip().startswith("{") and json.loads(body)  # JSON pretty-printed
    shoot(page, "message")


def test_a_reconciliation_entry_links_to_its_message(page, prepared: Prepared) -> None:
    page.goto("/reports")
    entry = page.locator("table.entries a.message-link").first
    message_id = entry.inner_text()
    entry.click()
    page.locator("a.message-link").first.click()
    assert page.locator("#unique-key").inner_text() == message_id
    assert page.locator("#report td.classification").first.inner_text() == "dead_lettered"
    assert page.locator("#copies table tr").count() > 1  # its retry and DLQ copies


def test_requeue_one_dead_letter_to_the_groups_retry_topic(page, prepared: Prepared) -> None:
    sign_in(page)
    page.goto(f"/dlq?group={GROUP}")
    row = page.locator(".failure-class tr[data-offset='1']")
    row.locator("input.pick").check()
    page.locator(".failure-class button", has_text="requeue selected").click()
    assert "re-sent 1" in page.locator("#outcome").inner_text()
    assert "×" in page.locator(".failure-class tr[data-offset='1'] td.resent").inner_text()
    options = StoreOptions(prepared.store_dir)
    with open_broker(options) as broker:
        dead_letter = broker.dead_letters(GROUP, 1, 1)[0]
        assert broker.dlq_resends.marks(GROUP)[1].count == 1
        store = broker.store
        copies = [view for queue_id in store.topics().get(retry_topic(GROUP), [])
                  for view in store.get_message("test", retry_topic(GROUP), queue_id, 0,
                                                max_count=64).messages
                  if view.properties.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID) == dead_letter.msg_id]
        assert len(copies) == 1 and copies[0].unique_key == dead_letter.unique_key
        assert not store.query_by_unique_key(TOPIC, dead_letter.unique_key)[1:]  # not re-sent
    assert_audited(prepared.database_url, "requeue-dead-letters", "alice@")


def test_rearm_a_void_stub_and_see_it_published(page, prepared: Prepared) -> None:
    void_ids = stubs(prepared.database_url, StubStatus.VOID)
    chosen = void_ids[0]
    sign_in(page)
    page.goto("/outbox")
    page.locator(f"table.void tr[data-id='{chosen}'] input.pick").check()
    page.locator("#alerts button", has_text="re-arm selected").click()
    assert "re-armed 1" in page.locator("#outcome").inner_text()
    assert chosen in stubs(prepared.database_url, StubStatus.UNCONFIRMED)
    with open_store(StoreOptions(prepared.store_dir)) as store:
        before = len(store.query_by_unique_key(TOPIC, chosen))
    publish_pending(prepared)
    with open_store(StoreOptions(prepared.store_dir)) as store:
        assert len(store.query_by_unique_key(TOPIC, chosen)) == before + 1
    page.goto(f"/messages?by=unique&topic={TOPIC}&q={chosen}")
    assert page.locator("a.message-link").count() == before + 1
    assert_audited(prepared.database_url, "rearm-stubs", "alice@")


def test_reset_a_groups_offsets_to_a_time(page, prepared: Prepared) -> None:
    sign_in(page)
    page.goto(f"/groups?group={GROUP}")
    form = page.locator("form.reset")
    form.locator("input[name=topic]").fill(TOPIC)
    form.locator("input[name=time]").fill("0")
    form.locator("button").click()
    assert "reset to 0" in page.locator("#outcome").inner_text()
    with open_broker(StoreOptions(prepared.store_dir)) as broker:
        progress = [queue for queue in broker.consumer_progress(GROUP) if queue.topic == TOPIC]
        assert progress and all(queue.committed_offset == queue.min_offset
                                for queue in progress)
    committed = page.locator(f"table[data-group={GROUP}] tr[data-topic={TOPIC}] td.committed")
    assert set(committed.all_inner_texts()) == {"0"}
    assert_audited(prepared.database_url, "reset-offsets", "alice@")

