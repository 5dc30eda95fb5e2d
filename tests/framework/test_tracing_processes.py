"""A trace across processes over the remote transport: the producer here, a ``postbox broker``
process in between, the consumer in a third process that exports its spans to a file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from postbox.framework import App
from tests.support.paths import REPO_ROOT
from tests.support.tracing import parent_id, spans  # noqa: F401  (fixture)

CONSUMER_TIMEOUT_S = 90


def test_handler_spans_in_another_process_are_children_of_the_publish_span(
        postbox_namesrv: str, tmp_path: Path, spans):  # noqa: F811
    namespace = f"trace-{time.time_ns() % 10**9}"
    store_url = f"rocketmq://{postbox_namesrv}?namespace={namespace}"
    with App(store_url=store_url, tracing=spans.tracing) as app, \
            spans.tracer.start_as_current_span("checkout") as checkout:
        sent = app.producer.send("orders", b"order-1")
    [publish] = spans.named("send orders")
    assert parent_id(publish) == checkout.context.span_id
    assert publish.attributes["server.port"] > 0  # the broker that stored it
    assert publish.attributes["messaging.rocketmq.namespace"] == namespace
    assert publish.attributes["messaging.destination.name"] == "orders"  # the application's
    [sends] = spans.histogram("messaging.client.operation.duration")
    assert sends.count == 1 and sends.attributes["server.port"] == publish.attributes["server.port"]

    exported = tmp_path / "spans.jsonl"
    consumer = subprocess.run(
        [sys.executable, "-m", "tests.support.traced_consumer_process", "--store-url",
         store_url, "--spans", str(exported), "--attempts", "2"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=CONSUMER_TIMEOUT_S)
    assert consumer.returncode == 0, consumer.stderr

    remote = [json.loads(line) for line in exported.read_text().splitlines()]
    attempts = [span for span in remote if span["name"] == "process orders"]
    assert [span["attributes"]["postbox.attempt"] for span in attempts] == [1, 2]
    assert {span["trace_id"] for span in attempts} == {f"{publish.context.trace_id:032x}"}
    assert {span["parent_span_id"] for span in attempts} == {f"{publish.context.span_id:016x}"}
    assert [span["events"] for span in attempts] == [["retry"], []]
    assert {span["kind"] for span in attempts} == {"CONSUMER"}
    assert {span["attributes"]["messaging.message.id"] for span in attempts} == {sent.msg_id}
    assert attempts[0]["attributes"]["messaging.consumer.group.name"] == "billing"
    assert {span["attributes"]["messaging.rocketmq.namespace"] for span in attempts} == {
        namespace}
