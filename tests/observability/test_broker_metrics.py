"""``postbox broker start --metrics 127.0.0.1:0`` in a subprocess: its endpoint (the port it
prints) serves the store's and the remoting server's families, with the values of what a
remote producer and consumer did (and every broker name the Grafana dashboard uses), and each
consumer group's lag per queue from the broker's offsets, bounded in series; a broker service
that an error stopped shows as down (and in the runtime info); a port in use ends the command
with a clear error."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

from bench.remoting_raw import RawRemotingClient
from postbox.framework import App, ConsumerOptions
from postbox.network.protocol.codes import RequestCode
from tests.support.broker_process import (
    DAMAGED_TIMER_WHEEL,
    POSTBOX,
    BrokerProcess,
    store_with_a_damaged_timer_wheel,
    write_broker_conf,
)
from tests.support.polling import wait_until

from .scrape import alert_rule_metric_names, dashboard_metric_names, scrape


def test_broker_endpoint_counts_remote_puts_and_gets(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", broker_conf=write_broker_conf(tmp_path),
                           extra=("--metrics", "127.0.0.1:0")).start()
    received: list[bytes] = []
    try:
        host, port = broker.metrics_address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        url = f"http://{broker.metrics_address}/metrics"
        app = App(store_url=f"rocketmq://{broker.namesrv_address}")

        @app.handler(topic="orders", consumer_group="billing", consume_from="first")
        def bill(message) -> None:
            received.append(message.body)

        with app:
            for number in range(7):
                app.producer.send("orders", f"order-{number}".encode())
            wait_until(lambda: len(received) == 7, what="the remote consumer")
            result = scrape(url)
    finally:
        assert broker.stop() == 0
    assert result.value("postbox_store_put_messages_total", topic="orders") == 7
    assert result.value("postbox_broker_messages_total", direction="put") == 7
    assert result.value("postbox_broker_messages_total", direction="get") >= 7
    assert result.value("postbox_broker_connections") >= 1
    sends = result.total("postbox_broker_requests_total", code="SEND_MESSAGE_V2") + result.total(
        "postbox_broker_requests_total", code="SEND_MESSAGE")
    assert sends == 7
    assert result.total("postbox_broker_requests_total", code="PULL_MESSAGE") >= 1
    assert result.total("postbox_store_put_bytes_total") == result.value(
        "postbox_store_commit_log_max_position_bytes")
    assert result.value("postbox_store_dispatch_lag_bytes") == 0
    broker_names = {n for n in dashboard_metric_names() | alert_rule_metric_names()
                    if n.startswith("postbox_broker_")}
    assert broker_names and sorted(broker_names - result.names()) == []  # dashboard's, rules'
    store_rules = {n for n in alert_rule_metric_names() if n.startswith("postbox_store_")}
    assert store_rules and sorted(store_rules - result.names()) == []  # the broker's store


def test_broker_metrics_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [POSTBOX, "broker", "start", "--store", str(tmp_path / "store"), "--listen",
             "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0", "--namesrv-listen",
             "127.0.0.1:0", "--metrics", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert f"--metrics: cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "in use" in done.stderr


FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)


def test_broker_exports_each_groups_lag_per_queue(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", broker_conf=write_broker_conf(tmp_path),
                           extra=("--metrics", "127.0.0.1:0")).start()
    billed: list[bytes] = []
    audit_holds = threading.Event()
    try:
        url = f"http://{broker.metrics_address}/metrics"
        app = App(store_url=f"rocketmq://{broker.namesrv_address}", consumer_options=FAST)

        @app.handler(topic="orders", consumer_group="billing", consume_from="first")
        def bill(message) -> None:
            billed.append(message.body)

        @app.handler(topic="orders", consumer_group="audit", consume_from="first")
        def audit(message) -> None:  # holds every message: the group commits nothing
            audit_holds.wait(30)

        with app:
            sent = [app.producer.send("orders", f"order-{n}".encode()) for n in range(7)]
            wait_until(lambda: len(billed) == 7, what="the billing consumer")
            wait_until(lambda: scrape(url).total("postbox_broker_consumer_lag_messages",
                                                 group="billing", topic="orders") == 0,
                       what="billing's committed offsets at the broker")
            result = scrape(url)
            audit_holds.set()
    finally:
        audit_holds.set()
        assert broker.stop() == 0
    assert result.total("postbox_broker_consumer_lag_messages", group="audit",
                        topic="orders") == 7
    for queue_id in {receipt.queue_id for receipt in sent}:  # one series per queue
        assert result.value("postbox_broker_consumer_lag_messages", group="audit",
                            topic="orders", queue=str(queue_id)) >= 1
    assert result.value("postbox_broker_consumer_lag_series_dropped") == 0


def test_broker_lag_series_are_bounded(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("POSTBOX_METRICS_LAG_SERIES_MAX", "3")
    broker = BrokerProcess(tmp_path / "store", broker_conf=write_broker_conf(tmp_path),
                           extra=("--metrics", "127.0.0.1:0")).start()
    try:
        url = f"http://{broker.metrics_address}/metrics"
        with App(store_url=f"rocketmq://{broker.namesrv_address}") as app:
            app.producer.send("orders", b"order")
            for group in ("a", "b"):  # two groups with a committed offset on every queue
                for queue_id in app.client.queue_ids("orders"):
                    app.client.commit_offset(group, "orders", queue_id, 0)
            queues = len(app.client.queue_ids("orders"))
            result = scrape(url)
    finally:
        assert broker.stop() == 0
    assert len(result.samples["postbox_broker_consumer_lag_messages"]) == 3
    assert result.value("postbox_broker_consumer_lag_series_dropped") == 2 * queues - 3


def test_a_broker_service_stopped_by_an_error_shows_in_metrics_and_runtime_info(
        tmp_path: Path) -> None:
    store = store_with_a_damaged_timer_wheel(tmp_path / "store")
    conf = write_broker_conf(tmp_path)
    broker = BrokerProcess(store, broker_conf=conf, extra=("--metrics", "127.0.0.1:0")).start()
    try:
        url = f"http://{broker.metrics_address}/metrics"
        wait_until(lambda: scrape(url).value("postbox_broker_service_up", service="timer") == 0,
                   what="the timer service's failure in the metrics")
        result = scrape(url)
        client = RawRemotingClient(broker.remoting_address)
        try:
            table = json.loads(client.call(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
        finally:
            client.close()
        with App(store_url=f"rocketmq://{broker.namesrv_address}") as app:
            app.producer.send("orders", b"still served")  # the broker serves on without timers
    finally:
        assert broker.stop() == 0
    for service in ("broker-persist", "delay", "transaction-check"):
        assert result.value("postbox_broker_service_up", service=service) == 1
    assert table["postboxServicesFailed"].startswith("timer: CorruptionError: ")
    assert "timerwheel" in table["postboxServicesFailed"]
    assert "[timer] stopped by an error" in broker.stderr_text()
    assert (store / "timerwheel").read_bytes() == DAMAGED_TIMER_WHEEL  # left as it was
