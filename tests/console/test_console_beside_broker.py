"""``postbox broker start --console``: the console served by the broker's own process, over
its live store (reads and writes through the running broker, no second opening)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Message
from tests.support.broker_process import (
    START_TIMEOUT_S,
    BrokerProcess,
    store_with_a_damaged_timer_wheel,
)

TOKEN = "beside-the-broker"


def test_the_broker_serves_the_console_over_its_live_store(tmp_path: Path) -> None:
    server = BrokerProcess(tmp_path / "store", extra=(
        "--console", "127.0.0.1:0", "--console-write-token", TOKEN)).start()
    try:
        line = server._lines.get(timeout=START_TIMEOUT_S)
        assert line.startswith("console listening on "), line
        url = f"http://{line.split()[-1]}"
        with RemotingBroker(server.namesrv_address) as remote:
            remote.create_topic("live", 2)
            remote.send(Message("live", b'{"n": 1}', keys=["k-1"]), queue_id=1)
        with httpx.Client(base_url=url, timeout=60) as client:
            topics = client.get("/topics").text
            assert 'data-topic="live"' in topics and "source-error" not in topics
            found = client.get("/messages?by=key&topic=live&q=k-1").text
            assert "message-link" in found
            csrf = re.search(r'name="csrf" content="([0-9a-f]+)"',
                             client.get("/").text).group(1)
            assert client.post("/login", data={"csrf": csrf, "token": TOKEN, "name": "ops"},
                               follow_redirects=False).status_code == 303
            made = client.post("/topics/create", data={"csrf": csrf, "topic": "made-live",
                                                       "queues": "2", "source": "store"},
                               follow_redirects=False)
            assert "done=" in made.headers["location"], made.headers["location"]
        with RemotingBroker(server.namesrv_address) as remote:
            assert remote.topic_config("made-live") is not None
    finally:
        assert server.stop() == 0


def test_the_console_reads_a_running_broker_through_remoting(tmp_path: Path) -> None:
    """``postbox console --broker rocketmq://…``: every page over the remoting admin
    requests, with a dead letter and a consumer group to show."""
    from postbox.storage_engine.formats import PROPERTY_DLQ_REASON
    from tests.console.scenario import console_process

    server = BrokerProcess(tmp_path / "store").start()
    try:
        with RemotingBroker(server.namesrv_address) as remote:
            remote.create_topic("orders", 2)
            receipt = remote.send(Message("orders", b"plain text", keys=["o-1"]), queue_id=0)
            # the send is acknowledged before the queue's dispatch: a long poll waits for it
            [view] = remote.pull("g1", "orders", 0, receipt.queue_offset, max_count=1,
                                 suspend_timeout_ms=20_000).messages
            remote.send_back("g1", view, delay_level=-1, reason="ValueError: order 7 is bad")
            remote.commit_offset("g1", "orders", 0, receipt.queue_offset + 1)
        with console_process(["--broker", f"rocketmq://{server.namesrv_address}"]) as url, \
                httpx.Client(base_url=url, timeout=60) as client:
            for path in ("/", "/topics", "/groups?group=g1", "/dlq?group=g1",
                         "/messages?by=key&topic=orders&q=o-1",
                         f"/messages?by=unique&topic=orders&q={receipt.unique_key}"):
                page = client.get(path).text
                assert "source-error" not in page, (path, page[-2000:])
            assert 'data-group="g1"' in client.get("/groups?group=g1").text
            dead = client.get("/dlq?group=g1").text
            assert "ValueError: order # is bad" in dead and PROPERTY_DLQ_REASON not in dead
            assert "plain text" in client.get(
                f"/message?source=broker&topic=orders&queue=0&offset={receipt.queue_offset}"
            ).text
    finally:
        assert server.stop() == 0


def test_a_broker_service_stopped_by_an_error_is_shown_on_the_overview(
        tmp_path: Path, browser) -> None:
    """The live broker's overview (``--console``) and a console reading it over remoting both
    name the timer service a damaged timer wheel stopped; in Chromium the row is on screen, in
    the alert colour (a screenshot is saved in the test's temp dir)."""
    from tests.console.scenario import console_process
    from tests.support.polling import wait_until

    store = store_with_a_damaged_timer_wheel(tmp_path / "store")
    server = BrokerProcess(store, extra=("--console", "127.0.0.1:0")).start()
    try:
        line = server._lines.get(timeout=START_TIMEOUT_S)
        url = f"http://{line.split()[-1]}"

        def stopped_shown(base: str) -> bool:
            page = httpx.get(base + "/", timeout=60).text
            return 'services-failed' in page and "CorruptionError" in page and "timer" in page

        wait_until(lambda: stopped_shown(url), what="the stopped timer service on the page")
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            tab.goto(url + "/")
            row = tab.locator("tr", has=tab.locator("td.services-failed"))
            row.wait_for(state="visible")
            assert row.locator("th").inner_text() == "service timer stopped"
            assert row.locator("td").inner_text().startswith("CorruptionError: ")
            assert row.locator("td").evaluate("cell => getComputedStyle(cell).color") \
                == "rgb(155, 44, 44)"  # .alert
            # bytes, written here: Playwright writes a ``path`` from an executor thread that
            # would outlive the test (the browser is the package's)
            (tmp_path / "overview.png").write_bytes(tab.screenshot(full_page=True))
        finally:
            tab.close()
        with console_process(["--broker", f"rocketmq://{server.namesrv_address}"]) as remote:
            assert stopped_shown(remote)
            assert "getTransferredTps" in httpx.get(remote + "/", timeout=60).text
    finally:
        assert server.stop() == 0
