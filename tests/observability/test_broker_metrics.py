"""``postbox broker start --metrics 127.0.0.1:0`` in a subprocess: its endpoint (the port it
prints) serves the store's and the remoting server's families, with the values of what a
remote producer and consumer did (and every broker name the Grafana dashboard uses); a port in
use ends the command with a clear error."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from framework import App
from tests.support.broker_process import POSTBOX, BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

from .scrape import dashboard_metric_names, scrape


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
    broker_names = {n for n in dashboard_metric_names() if n.startswith("postbox_broker_")}
    assert broker_names and sorted(broker_names - result.names()) == []  # the dashboard's


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
