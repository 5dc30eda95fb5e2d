"""``app.metrics_server``: a real HTTP endpoint per app, read at scrape time.

The scrape's values are checked against what the test did: messages sent per topic and their
bytes (the commit log's end, on a fresh store), handler outcomes (success, retry, dead letter),
lag, handler latency counts. Two apps in one process each serve their own figures and nothing
is registered in prometheus-client's global registry; ``app.stop()`` closes the endpoint; a
port in use is a clear error.
"""

from __future__ import annotations

import socket
import threading
import urllib.error
from pathlib import Path

import prometheus_client
import pytest

from postbox.framework import App, DeadLetter, RetryLater
from postbox.framework.metrics import MetricsServerError
from postbox.storage_engine import Broker, DiskFullError, MessageStore, RetentionConfig, StoreConfig
from tests.support.polling import wait_until

from .scrape import scrape

SMALL_FAST = {"messageDelayLevel": " ".join(["50ms"] * 18),
              "mappedFileSizeCommitLog": str(1 << 20)}
"""Retries within a test; 1 MiB log segments (the default 1 GiB is preallocated)."""


def _app(path: Path) -> App:
    return App(store_url=path, broker_conf=SMALL_FAST)


def test_scrape_counts_puts_outcomes_lag_and_latency(tmp_path: Path) -> None:
    app = _app(tmp_path / "store")
    attempts: dict[bytes, int] = {}
    lock = threading.Lock()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 reconsume_count_max=3)
    def bill(message) -> None:
        with lock:
            attempts[message.body] = attempts.get(message.body, 0) + 1
            seen = attempts[message.body]
        if message.body == b"poison":
            raise DeadLetter("never billable")
        if message.body == b"flaky" and seen == 1:
            raise RetryLater()

    with app:
        server = app.metrics_server(0)
        assert server.port > 0
        for body in (b"ok-1", b"ok-2", b"flaky", b"poison"):
            app.producer.send("orders", body, tags="paid")
        app.producer.send("audit", b"12345")  # no handler subscribes: lag stays
        wait_until(lambda: attempts.get(b"flaky") == 2 and app.consumer("billing")
                   .in_flight_count() == 0, what="the flaky message's retry")
        wait_until(lambda: sum(q.lag for q in app.client.consumer_progress("billing")
                               if q.topic == "orders") == 0, what="offsets committed")
        assert app.broker.store.wait_dispatched()  # puts are counted as dispatch applies them
        result = scrape(server.url)
        store = app.broker.store

    assert result.value("postbox_store_put_messages_total", topic="orders") == 4
    assert result.value("postbox_store_put_messages_total", topic="audit") == 1
    # the retry copy and the dead letter are stored too, in the group's system topics
    assert result.value("postbox_store_put_messages_total", topic="%RETRY%billing") == 1
    assert result.value("postbox_store_put_messages_total", topic="%DLQ%billing") == 1
    assert result.total("postbox_store_put_bytes_total") == result.value(
        "postbox_store_commit_log_max_position_bytes") > 0
    assert result.value("postbox_store_dispatch_lag_bytes") == 0
    assert result.value("postbox_store_disk_used_bytes") > 0
    assert result.value("postbox_store_disk_free_bytes") > 0
    assert store.commit_log.max_position == result.value(
        "postbox_store_commit_log_max_position_bytes")
    # ok-1, ok-2, flaky (2nd attempt) handled; flaky's 1st attempt retried; poison dead
    assert result.value("postbox_consumer_handled_total", group="billing") == 3
    assert result.value("postbox_consumer_failed_total", group="billing") == 2
    assert result.value("postbox_consumer_retried_total", group="billing") == 1
    assert result.value("postbox_consumer_dead_lettered_total", group="billing") == 1
    assert result.value("postbox_consumer_handler_seconds_count", group="billing",
                        topic="orders") == 5
    assert result.value("postbox_consumer_handler_seconds_bucket", group="billing",
                        topic="orders", le="+Inf") == 5
    assert result.total("postbox_consumer_lag_messages", group="billing", topic="orders") == 0
    assert "postbox_store_flush_seconds" in result.families


def test_two_apps_in_one_process_serve_their_own_figures(tmp_path: Path) -> None:
    first, second = _app(tmp_path / "one"), _app(tmp_path / "two")
    with first, second:
        urls = [first.metrics_server(0).url, second.metrics_server(0).url]
        first.producer.send("orders", b"a")
        for _ in range(3):
            second.producer.send("orders", b"b")
        first.broker.store.wait_dispatched()
        second.broker.store.wait_dispatched()
        counts = [scrape(url).value("postbox_store_put_messages_total", topic="orders")
                  for url in urls]
    assert counts == [1, 3]
    global_names = {family.name for family in prometheus_client.REGISTRY.collect()}
    assert not any(name.startswith("postbox_") for name in global_names)


def test_stop_closes_the_endpoint_and_a_restart_serves_again(tmp_path: Path) -> None:
    app = _app(tmp_path / "store")
    app.start()
    url = app.metrics_server(0).url
    assert scrape(url).value("postbox_store_dispatch_lag_bytes") == 0
    app.stop()
    with pytest.raises(urllib.error.URLError):
        scrape(url)
    with app:  # the same app again: its registry is reused, no duplicate collectors
        assert "postbox_store_put_messages" in scrape(app.metrics_server(0).url).families


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with _app(tmp_path / "store") as app, pytest.raises(
                MetricsServerError, match=f"127.0.0.1:{port}.*in use"):
            app.metrics_server(port)


def test_disk_gauges_follow_the_stores_measurement_and_watermark(tmp_path: Path) -> None:
    # a full disk cannot be made for real here: the store's disk probe reports the usage
    used = [0.5]
    store = MessageStore.open(
        StoreConfig(root_dir=tmp_path / "store",
                    retention=RetentionConfig(disk_space_warning_level_ratio=80)),
        disk_usage=lambda _path: used[0])
    broker = Broker(store, owns_store=True)
    app = App(broker=broker)

    def refused() -> bool:
        try:
            app.producer.send("orders", b"order")
        except DiskFullError:
            return True
        return False

    try:
        with app:
            url = app.metrics_server(0).url
            assert not refused()  # a put measures the disk
            roomy = scrape(url)
            used[0] = 0.95
            wait_until(refused, what="a put refused at the watermark")
            full = scrape(url)
    finally:
        broker.close()
    assert roomy.value("postbox_store_disk_used_ratio") == 0.5
    assert roomy.value("postbox_store_disk_warning_level_ratio") == 0.8
    assert roomy.value("postbox_store_disk_full") == 0
    assert full.value("postbox_store_disk_used_ratio") == 0.95
    assert full.value("postbox_store_disk_full") == 1
