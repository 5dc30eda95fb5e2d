"""JSON-structured logs: lines written while a message is handled carry its fields."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from postbox.framework import (
    App,
    ConfigurationError,
    ConsumerOptions,
    DeadLetter,
    configure_logging,
)
from postbox.framework.log_format import HANDLER_MARK, parse_log_format
from postbox.framework.testing import InlineRunner
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_until
from tests.support.tracing import spans  # noqa: F401  (fixture)

FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)
log = logging.getLogger("tests.billing")


class Captured:
    """The root logger's output through ``configure_logging``, one line per record."""

    def __init__(self, log_format: str) -> None:
        self.stream = io.StringIO()
        self.previous_level = logging.getLogger().level
        self.handler = configure_logging(log_format, stream=self.stream)

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.lines()]

    def close(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        logging.getLogger().setLevel(self.previous_level)


@pytest.fixture
def json_logs() -> Iterator[Captured]:
    captured = Captured("json")
    yield captured
    captured.close()


def test_handler_and_consumer_lines_carry_the_message(open_broker, client, json_logs,
                                                      spans):  # noqa: F811
    app = App(broker=client(open_broker()), consumer_options=FAST, tracing=spans.tracing)
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing")
    def bill(message):
        log.info("charging %s", message.text, extra={"amount_cents": 1250})
        if message.text == "poison":
            raise DeadLetter("cannot parse")
        handled.set()

    app.start()
    log.info("started")
    paid = app.producer.send("orders", "order-1")
    poison = app.producer.send("orders", "poison")
    assert handled.wait(30)
    wait_until(lambda: any("dead-lettered" in line for line in json_logs.lines()),
               what="the consumer's dead-letter warning")
    app.stop()

    records = json_logs.records()  # every line is one JSON object
    by_message = {record["message"]: record for record in records}
    started = by_message["started"]
    assert set(started) == {"time", "level", "logger", "message"}  # not in a handler
    assert started["time"].endswith("Z") and started["level"] == "INFO"
    charged = by_message["charging order-1"]
    assert {key: charged[key] for key in ("logger", "topic", "group", "queue", "offset",
                                          "msg_id", "amount_cents")} == {
        "logger": "tests.billing", "topic": "orders", "group": "billing",
        "queue": paid.queue_id, "offset": paid.queue_offset, "msg_id": paid.msg_id,
        "amount_cents": 1250}
    [process] = [span for span in spans.named("process orders")
                 if span.attributes["messaging.message.id"] == paid.msg_id]
    assert charged["trace_id"] == f"{process.context.trace_id:032x}"
    assert charged["span_id"] == f"{process.context.span_id:016x}"
    [dead] = [record for record in records if "dead-lettered" in record["message"]
              and record["logger"] == "postbox.framework.consume_service"]
    assert dead["level"] == "WARNING"
    assert (dead["msg_id"], dead["offset"], dead["group"]) == (
        poison.msg_id, poison.queue_offset, "billing")
    assert dead["postbox_dead_lettered_by"] == "billing"  # the record's extra= attribute


def test_text_lines_append_the_fields(open_broker, client):
    app = App(broker=client(open_broker()), tracing=False)
    app.handler(topic="orders", consumer_group="billing", consume_from="first")(
        lambda message: log.warning("charging"))
    sent = app.producer.send("orders", "order-1")
    text = Captured("text")
    try:
        log.warning("outside")
        InlineRunner(app).run_until_idle()
        app.stop()
        lines = text.lines()
    finally:
        text.close()
    assert lines[0].endswith(" WARNING tests.billing outside")
    [charging] = [line for line in lines if "charging" in line]
    assert charging.endswith(
        f" WARNING tests.billing charging topic=orders group=billing queue={sent.queue_id} "
        f"offset={sent.queue_offset} msg_id={sent.msg_id}")


def test_an_exception_stays_inside_its_one_json_object(json_logs):
    try:
        raise ValueError("bad amount")
    except ValueError:
        log.exception("failed")
    [record] = json_logs.records()
    assert record["message"] == "failed" and record["level"] == "ERROR"
    assert record["exception"].splitlines()[-1] == "ValueError: bad amount"


def test_configure_logging_replaces_its_own_handler_and_checks_the_format():
    first = Captured("json")
    second = Captured("text")
    try:
        ours = [h for h in logging.getLogger().handlers if getattr(h, HANDLER_MARK, False)]
        assert ours == [second.handler]
        with pytest.raises(ConfigurationError, match="log format 'yaml': one of text, json"):
            parse_log_format("yaml")
    finally:
        second.close()
        first.close()


def test_an_async_handlers_lines_carry_the_message(open_broker, client, json_logs):
    app = App(broker=client(open_broker()), consumer_options=FAST, tracing=False)
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing")
    async def bill(message):
        log.info("charging on the loop")
        handled.set()

    app.start()
    sent = app.producer.send("orders", "order-1")
    assert handled.wait(30)
    app.stop()
    [record] = [r for r in json_logs.records() if r["message"] == "charging on the loop"]
    assert (record["topic"], record["group"], record["msg_id"]) == ("orders", "billing",
                                                                    sent.msg_id)


CELERY_PROBE = """
import logging
from postbox.framework.contrib.celery import create_celery
app = create_celery("probe", broker_url="redis://127.0.0.1:1/0")
app.log.setup(loglevel="INFO")  # what a worker or beat does at start-up
logging.getLogger("probe").info("hello")
logging.getLogger("probe").debug("hidden")
"""


def test_celery_worker_logs_json_with_the_environment_variable():
    done = subprocess.run([sys.executable, "-c", CELERY_PROBE], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120,
                          env={**os.environ, "POSTBOX_LOG_FORMAT": "json"})
    assert done.returncode == 0, done.stderr
    [record] = [json.loads(line) for line in done.stderr.splitlines()]
    assert (record["logger"], record["level"], record["message"]) == ("probe", "INFO", "hello")
