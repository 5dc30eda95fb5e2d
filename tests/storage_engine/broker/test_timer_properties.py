"""The timer properties of a send read as Apache RocketMQ 5.3 reads them (the lab's side-by-side
test checks the same cases against a live broker): ``Long.parseLong`` (a sign, decimal digits of
any script; no spaces, ``_``, fractions, or values past 64 bits), Java's wrapping arithmetic (a
delay of ``Long.MAX_VALUE`` seconds overflows to the past: delivered at once), and a delete
marker whose time has passed refused."""

from __future__ import annotations

import pytest

from postbox.storage_engine import Message
from postbox.storage_engine.broker.timer_messages import (
    java_long,
    schedule_timer,
    timer_deliver_ms,
)
from postbox.storage_engine.errors import InvalidMessageError

NOW = 1_800_000_000_000


@pytest.mark.parametrize(("text", "value"), [
    ("5", 5), ("+5", 5), ("-5", -5), ("\u0665", 5), ("0012", 12),
    (str(2**63 - 1), 2**63 - 1), (str(-(2**63)), -(2**63))])
def test_java_long_accepts_what_long_parselong_accepts(text, value):
    assert java_long(text) == value


@pytest.mark.parametrize("text", [
    "", "+", "-", " 5", "5 ", "5_0", "1.5", "0x10", "soon", str(2**63), str(-(2**63) - 1)])
def test_java_long_refuses_what_long_parselong_refuses(text):
    with pytest.raises(ValueError, match="Java long"):
        java_long(text)


def test_deliver_times_wrap_as_java_longs():
    assert timer_deliver_ms({"TIMER_DELAY_SEC": "+5"}, NOW) == NOW + 5000
    assert timer_deliver_ms({"TIMER_DELAY_MS": "-5"}, NOW) == NOW - 5
    assert timer_deliver_ms({"TIMER_DELAY_SEC": str(2**63 - 1)}, NOW) == NOW - 1000  # wrapped
    assert timer_deliver_ms({"TIMER_DELIVER_MS": "7"}, NOW) == 7
    with pytest.raises(InvalidMessageError, match="not an integer"):
        timer_deliver_ms({"TIMER_DELIVER_MS": str(-(2**64))}, NOW)
    with pytest.raises(InvalidMessageError, match="not an integer"):
        timer_deliver_ms({"TIMER_DELAY_SEC": " 5"}, NOW)


def schedule(properties: dict[str, str]) -> Message | None:
    return schedule_timer(Message("T", b"x", properties=properties), 0, NOW, enabled=True,
                          max_delay_s=259_200, levels_ms=(1000,))


def test_overflowing_delay_is_not_a_timer_and_a_late_delete_marker_is_refused():
    assert schedule({"TIMER_DELAY_SEC": str(2**63 - 1)}) is None  # stored as it is, at once
    with pytest.raises(InvalidMessageError, match="delete marker"):
        schedule({"TIMER_DEL_UNIQKEY": "T+K", "TIMER_DELIVER_MS": str(NOW - 1)})
    marker = schedule({"TIMER_DEL_UNIQKEY": "T+K", "TIMER_DELIVER_MS": str(NOW + 1000)})
    assert marker is not None and marker.properties["TIMER_OUT_MS"] == str(NOW + 1000)
    assert schedule({"TIMER_DEL_UNIQKEY": "T+K"}) is not None  # no time: a marker at now
