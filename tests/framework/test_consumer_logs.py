"""What a consumer logs: its start is one line per group (not one per queue), and a broker
outage is one warning for the whole outage (not a traceback per scheduled rebalance), with one
line when the broker answers again."""

from __future__ import annotations

import logging

import pytest

from postbox.framework import App, ConsumerOptions
from postbox.framework.outage_log import OutageLog
from postbox.storage_engine import BrokerUnavailableError, FakeClock
from tests.support.polling import wait_until
from tests.support.postbox_remoting import serve_remoting

FAST = ConsumerOptions(rebalance_interval_ms=50, heartbeat_interval_ms=50,
                       persist_interval_ms=50, long_polling_ms=200)


def framework_records(caplog, level: int = logging.DEBUG) -> list[logging.LogRecord]:
    return [record for record in caplog.records
            if record.name.startswith("postbox.framework") and record.levelno >= level]


def test_a_consumer_start_is_one_line_per_group(open_broker, caplog):
    broker = open_broker()
    for topic in ("orders", "refunds"):
        broker.create_topic(topic, 8)
    app = App(broker=broker)
    app.handler(topic="orders", consumer_group="billing")(lambda message: None)
    app.handler(topic="refunds", consumer_group="billing")(lambda message: None)
    app.handler(topic="orders", consumer_group="shipping")(lambda message: None)
    with caplog.at_level(logging.INFO, logger="postbox.framework"):
        app.start(threads=False)
        lines = [record.getMessage() for record in framework_records(caplog, logging.INFO)]
        app.stop()
    started = [line for line in lines if "joined" in line or "rebalance" in line]
    assert len(started) == 2, started
    billing = next(line for line in started if "group billing" in line)
    assert "17 queues: %RETRY%billing[0], orders[0-7], refunds[0-7]" in billing


@pytest.mark.embedded_only("serves its own embedded broker over remoting and stops it")
def test_an_outage_is_one_warning_not_a_traceback_per_rebalance(open_broker, caplog):
    broker = open_broker()  # embedded, served over remoting: the app reaches it by rocketmq://
    with serve_remoting(broker) as remote:
        app = App(remote.store_url, consumer_options=FAST)
        app.handler(topic="orders", consumer_group="billing")(lambda message: None)
        app.start()
        try:
            with caplog.at_level(logging.DEBUG, logger="postbox.framework"):
                assert remote.node is not None
                remote.node.stop()  # the outage: name server and broker gone
                outage = app.consumer("billing").outage
                wait_until(lambda: outage.failures("rebalance") >= 5,
                           what="rebalances failing")
                records = framework_records(caplog)
        finally:
            app.stop()
    warnings = [record for record in records if record.levelno >= logging.WARNING]
    assert [record.getMessage() for record in warnings if "[outage]" in record.getMessage()]
    assert len(warnings) == 1, [record.getMessage() for record in warnings]
    assert "billing" in warnings[0].getMessage()
    assert not [record for record in records if record.exc_info]


def test_the_outage_ends_when_the_last_failing_call_answers(caplog):
    clock = FakeClock(1_000)
    outage = OutageLog("consumer c1 in billing", clock)
    error = BrokerUnavailableError("cannot connect")
    with caplog.at_level(logging.DEBUG, logger="postbox.framework.consumer"):
        outage.failed("rebalance", error, 2_000)
        outage.failed("pull", error, 1_000)
        outage.failed("rebalance", error, 2_000)
        outage.succeeded("pull")  # pulls answer again; rebalance still fails
        assert outage.unreachable
        clock.advance(4_500)
        outage.succeeded("rebalance")
    assert not outage.unreachable
    levels = [(record.levelname, record.getMessage().split(": ", 1)[1])
              for record in caplog.records]
    assert [level for level, _ in levels] == ["WARNING", "DEBUG", "DEBUG", "DEBUG", "DEBUG",
                                              "INFO"]
    assert levels[0][1].startswith("rebalance failed, the broker is unreachable (cannot connect)")
    assert levels[-1][1] == "the broker answers again after 4500 ms"
