"""Timer messages (delivery at any moment) on an embedded broker with its service threads: the
diverted record (``rmq_sys_wheel_timer``, ``REAL_TOPIC``/``REAL_QID``, ``TIMER_OUT_MS``),
delivery never early and within a measured lateness, the relative properties, a moment in the
past (at once), the maximum delay and the off switch (refused), ``DELAY`` taking precedence,
batches refused, and a reopen that delivers what was pending — and not what was delivered."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest

from postbox.storage_engine import Broker, InvalidMessageError, Message
from postbox.storage_engine.broker.timer_files import TimerFiles
from postbox.storage_engine.broker.timer_service import TIMER_PROGRESS_GROUP
from postbox.storage_engine.config import DelayConfig
from postbox.storage_engine.formats.timer_layout import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    TimerUnit,
    decode_unit,
    encode_unit,
)
from postbox.storage_engine.formats.topic_names import TIMER_TOPIC
from tests.storage_engine.conftest import small_config
from tests.support.polling import wait_until

P99_LATENESS_MS_MAX = 1100
"""What delivery "at the moment, within the precision" means (1 s, as Apache's timers, plus
100 ms), asserted for the 99th percentile; the figures are printed (a few ms unloaded; 280 ms
once with nine CI lanes beside). ``postbox bench timers`` measures lateness."""


def open_broker(root: Path, **delay) -> Broker:
    return Broker.open(small_config(root, tiny=False, delay=DelayConfig(**delay)))


def now_ms() -> int:
    return int(time.time() * 1000)


def read_all(broker: Broker, topic: str) -> list:
    messages: list = []
    while batch := broker.pull("inspector", topic, 0, len(messages), 32).messages:
        messages.extend(batch)
    return messages


def delivered(broker: Broker, topic: str, count: int, timeout_s: float = 15) -> list:
    def found():
        messages = read_all(broker, topic)
        return len(messages) >= count and messages
    return wait_until(found, timeout_s=timeout_s)


def test_timer_messages_are_delivered_at_their_moment_never_early(tmp_path):
    with open_broker(tmp_path / "s") as broker:
        start = now_ms()
        asked = {f"m{n}": start + 300 + 37 * n for n in range(50)}
        for body, deliver_ms in reversed(asked.items()):  # sent in reverse time order
            result = broker.send(Message("later", body.encode(), properties={
                "TIMER_DELIVER_MS": str(deliver_ms)}), queue_id=0)
            assert (result.stored_topic, result.stored_queue_id) == (TIMER_TOPIC, 0)
            assert result.topic == "later" and result.queue_id == 0
        record = broker.store.read_message(result.log_position)
        assert record.properties["REAL_TOPIC"] == "later"
        assert record.properties["REAL_QID"] == "0"
        assert record.properties["TIMER_OUT_MS"] == str(asked["m0"])
        views = delivered(broker, "later", len(asked))
        assert [view.body.decode() for view in views] == list(asked)  # in deliver-time order
        lateness = sorted(view.store_timestamp_ms - asked[view.body.decode()] for view in views)
        for view in views:
            assert "REAL_TOPIC" not in view.properties and "REAL_QID" not in view.properties
            assert view.properties["TIMER_OUT_MS"] == str(asked[view.body.decode()])
            assert int(view.properties["TIMER_DEQUEUE_MS"]) >= asked[view.body.decode()]
            assert "TIMER_ENQUEUE_MS" in view.properties
        p99 = lateness[int(len(lateness) * 0.99) - 1]
        sys.stdout.write(f"timer lateness ms: min {lateness[0]} median "
                         f"{statistics.median(lateness)} p99 {p99} max {lateness[-1]}\n")
        assert lateness[0] >= 0
        assert p99 <= P99_LATENESS_MS_MAX
        assert broker.query_offset(TIMER_PROGRESS_GROUP, TIMER_TOPIC, 0) == len(asked)


def test_relative_past_delay_precedence_and_refusals(tmp_path):
    with open_broker(tmp_path / "s") as broker:
        sent_ms = now_ms()
        for body, properties in (("sec", {"TIMER_DELAY_SEC": "1"}),
                                 ("ms", {"TIMER_DELAY_MS": "400"}),
                                 ("level", {"DELAY": "1", "TIMER_DELAY_SEC": "100"})):
            broker.send(Message("rel", body.encode(), properties=properties), queue_id=0)
        past = broker.send(Message("rel", b"past", properties={
            "TIMER_DELIVER_MS": str(sent_ms - 60_000)}), queue_id=0)
        assert past.stored_topic == "rel"  # due already: stored normally, at once
        views = {view.body: view for view in delivered(broker, "rel", 4)}
        assert views[b"sec"].store_timestamp_ms >= sent_ms + 1000
        assert views[b"ms"].store_timestamp_ms >= sent_ms + 400
        assert "TIMER_DELAY_SEC" not in views[b"sec"].properties  # a resend must not wait again
        assert "TIMER_DELAY_MS" not in views[b"ms"].properties
        assert views[b"level"].properties["REAL_TOPIC"] == "rel"  # went through the levels
        assert views[b"level"].store_timestamp_ms < sent_ms + 100_000
        with pytest.raises(InvalidMessageError, match="timerMaxDelaySec=259200"):
            broker.send(Message("rel", b"far", properties={
                "TIMER_DELIVER_MS": str(now_ms() + 259_201_000)}))
        with pytest.raises(InvalidMessageError, match="not an integer"):
            broker.send(Message("rel", b"bad", properties={"TIMER_DELAY_SEC": "soon"}))
        with pytest.raises(InvalidMessageError, match="delayed"):
            broker.send_batch([Message("rel", b"b", properties={"TIMER_DELAY_MS": "5"})])
    with (open_broker(tmp_path / "off", timer_enabled=False, timer_max_delay_s=10) as broker,
          pytest.raises(InvalidMessageError, match="timerWheelEnable")):
        broker.send(Message("rel", b"off", properties={"TIMER_DELAY_SEC": "1"}))


def test_reopen_delivers_pending_timers_once(tmp_path):
    config = small_config(tmp_path / "s", tiny=False)
    with Broker.open(config) as broker:
        start = now_ms()
        broker.send(Message("again", b"long", properties={
            "TIMER_DELIVER_MS": str(start + 2500)}, unique_key="0A" * 16), queue_id=0)
        broker.send(Message("again", b"short", properties={
            "TIMER_DELIVER_MS": str(start + 200)}, unique_key="0B" * 16), queue_id=0)
        assert [view.body for view in delivered(broker, "again", 1)] == [b"short"]
        # the long one is pending below the short one: the watermark stays at offset 0
        assert broker.query_offset(TIMER_PROGRESS_GROUP, TIMER_TOPIC, 0) in (None, 0)
    with Broker.open(config) as broker:
        views = delivered(broker, "again", 2)
        time.sleep(0.3)
        views = read_all(broker, "again")
        assert [view.body for view in views] == [b"short", b"long"]  # short not again
        assert views[1].store_timestamp_ms >= start + 2500
        assert broker.timer_service.pending_count() == 0


def timer(topic: str, body: bytes, deliver_ms: int, key: str, **extra: str) -> Message:
    return Message(topic, body, properties={"TIMER_DELIVER_MS": str(deliver_ms), **extra},
                   unique_key=key)


def test_a_timer_whose_append_a_kill_cut_short_is_read_again_and_delivered_once(tmp_path):
    config = small_config(tmp_path / "s", tiny=False)
    start = now_ms()
    with Broker.open(config) as broker:
        broker.send(timer("torn", b"whole", start + 1500, "0A" * 16), queue_id=0)
        wait_until(lambda: broker.timer_service.pending_count() == 1, timeout_s=10)
        broker.timer_service.stop()  # its files are flushed: what follows is after the flush
        broker.send(timer("torn", b"cut", start + 1500, "0B" * 16), queue_id=0)
    timer_log = tmp_path / "s" / "timerlog" / f"{0:020d}"
    with open(timer_log, "r+b") as log_file:
        log_file.seek(52)
        assert log_file.read(52) == bytes(52)
        log_file.seek(52)
        log_file.write(encode_unit(TimerUnit(0, MAGIC_DEFAULT, start, 1500, 1, 1, 0))[:30])
    with Broker.open(config) as broker:
        delivered(broker, "torn", 2)
        time.sleep(0.3)
        assert sorted(view.body for view in read_all(broker, "torn")) == [b"cut", b"whole"]
    assert decode_unit(timer_log.read_bytes(), 52) is not None  # written over, whole


def test_a_delete_marker_cancels_the_pending_timer_of_its_unique_key(tmp_path):
    with open_broker(tmp_path / "s") as broker:
        start = now_ms()
        broker.send(timer("cancel", b"gone", start + 600, "0C" * 16), queue_id=0)
        broker.send(timer("cancel", b"gone too", start + 600, "0D" * 16), queue_id=0)
        broker.send(timer("cancel", b"kept", start + 700, "0E" * 16), queue_id=0)
        marker = broker.send(timer("cancel", b"x", start + 600, "0F" * 16,
                                   TIMER_DEL_UNIQKEY="0C" * 16), queue_id=0)
        assert marker.stored_topic == TIMER_TOPIC
        broker.send(timer("cancel", b"y", start + 600, "1F" * 16,
                          TIMER_DEL_UNIQKEY="cancel+" + "0D" * 16), queue_id=0)  # 5.2's form
        broker.send(Message("cancel", b"z", properties={"TIMER_DEL_UNIQKEY": "0E" * 15},
                            unique_key="2F" * 16), queue_id=0)  # no such timer, due now
        assert [view.body for view in delivered(broker, "cancel", 1)] == [b"kept"]
        time.sleep(0.3)
        assert [view.body for view in read_all(broker, "cancel")] == [b"kept"]
        assert broker.timer_service.cancelled_count == 2
        assert broker.timer_service.pending_count() == 0


def test_cancels_survive_a_restart_whichever_comes_first(tmp_path):
    config = small_config(tmp_path / "s", tiny=False)
    with Broker.open(config) as broker:
        broker.timer_service.stop()  # the rebuild after the reopen reads every record
        start = now_ms()
        broker.send(timer("again", b"last", start + 2200, "0A" * 16), queue_id=0)
        broker.send(timer("again", b"target", start + 1200, "0B" * 16), queue_id=0)
        broker.send(timer("again", b"m", start + 1200, "0C" * 16,
                          TIMER_DEL_UNIQKEY="0B" * 16), queue_id=0)
        broker.send(timer("again", b"m", start + 1500, "0D" * 16,
                          TIMER_DEL_UNIQKEY="0E" * 16), queue_id=0)  # sent before its target
        broker.send(timer("again", b"late target", start + 1400, "0E" * 16), queue_id=0)
    with Broker.open(config) as broker:
        assert [view.body for view in delivered(broker, "again", 1)] == [b"last"]
        assert now_ms() >= start + 2200
        assert broker.timer_service.cancelled_count == 2
    with Broker.open(config) as broker:  # what was cancelled stays cancelled
        time.sleep(0.5)
        assert [view.body for view in read_all(broker, "again")] == [b"last"]


def pend_target_and_kept(broker: Broker, topic: str, ahead_ms: int) -> int:
    """Two timers pending in the wheel: "target" (key 0A…) ``ahead_ms`` ahead and "kept"
    100 ms after it; the moment of the target."""
    target_ms = now_ms() + ahead_ms
    broker.send(timer(topic, b"target", target_ms, "0A" * 16), queue_id=0)
    broker.send(timer(topic, b"kept", target_ms + 100, "0B" * 16), queue_id=0)
    wait_until(lambda: broker.timer_service.pending_count() == 2)
    return target_ms


def assert_only_kept_delivered(broker: Broker, topic: str) -> None:
    assert [view.body for view in delivered(broker, topic, 1)] == [b"kept"]
    time.sleep(0.3)
    assert [view.body for view in read_all(broker, topic)] == [b"kept"]
    assert broker.timer_service.cancelled_count == 1


def test_a_marker_after_a_restart_cancels_a_timer_read_back_from_the_wheel(tmp_path):
    config = small_config(tmp_path / "s", tiny=False)
    with Broker.open(config) as broker:
        target_ms = pend_target_and_kept(broker, "after", 3000)
    with Broker.open(config) as broker:  # read back from the wheel: keys through the index
        broker.send(timer("after", b"m", target_ms, "0C" * 16,
                          TIMER_DEL_UNIQKEY="0A" * 16), queue_id=0)
        assert_only_kept_delivered(broker, "after")


def test_a_marker_kept_beside_its_target_in_the_wheel_cancels_it_after_a_restart(tmp_path):
    """Both records pending in the wheel, as Apache leaves them (it matches a marker with a
    target of its slot only when the slot falls due); the restart reads both back."""
    config = small_config(tmp_path / "s", tiny=False)
    with Broker.open(config) as broker:
        target_ms = pend_target_and_kept(broker, "beside", 4000)
        broker.timer_service.stop()  # the marker below reaches the queue, not the wheel
        sent = broker.send(timer("beside", b"m", target_ms, "0C" * 16,
                                 TIMER_DEL_UNIQKEY="0A" * 16), queue_id=0)
        assert broker.store.wait_dispatched()
        marker = broker.store.read_message(sent.log_position)
    files = TimerFiles(config.root_dir, config.delay.timer_precision_ms,
                       config.delay.timer_log_segment_size_bytes)
    check = files.load()
    assert check is not None
    write_ms = now_ms() // 1000 * 1000  # the marker's record, as Apache appends it
    files.append(TimerUnit(-1, MAGIC_DEFAULT | MAGIC_DELETE, write_ms, target_ms - write_ms,
                           marker.log_position, marker.store_size, 0))
    files.write_check(check.last_read_time_ms, marker.queue_offset + 1, now_ms())
    files.close()
    with Broker.open(config) as broker:
        assert_only_kept_delivered(broker, "beside")


def test_a_marker_waits_for_targets_stored_until_its_time_even_in_a_backlog(tmp_path,
                                                                           monkeypatch):
    from postbox.storage_engine.broker import timer_service

    config = small_config(tmp_path / "s", tiny=False)
    with Broker.open(config) as broker:
        broker.timer_service.stop()
        start = now_ms()  # every send below is stored before the first marker's time (with
        # the moments 5x nearer, a loaded CI lane once stored the target after it: kept)
        broker.send(timer("late", b"last", start + 4500, "0A" * 16), queue_id=0)
        broker.send(timer("late", b"m", start + 1200, "0B" * 16,
                          TIMER_DEL_UNIQKEY="0C" * 16), queue_id=0)
        for n in range(4):  # a backlog between the marker and its target
            broker.send(timer("late", b"filler", start + 3000, f"{n:02X}" * 16), queue_id=0)
        broker.send(timer("late", b"target", start + 3000, "0C" * 16), queue_id=0)
        broker.send(Message("late", b"m", properties={"TIMER_DEL_UNIQKEY": "0D" * 16},
                            unique_key="0E" * 16), queue_id=0)  # its time is now
        time.sleep(0.05)
        broker.send(timer("late", b"after the marker", start + 3000, "0D" * 16), queue_id=0)
    time.sleep(max(0.0, (start + 1300 - now_ms()) / 1000))  # the first marker is past its time
    monkeypatch.setattr(timer_service, "INGEST_BATCH_MAX", 2)
    with Broker.open(config) as broker:
        views = delivered(broker, "late", 6)
        assert sorted(view.body for view in views) == [b"after the marker", *[b"filler"] * 4,
                                                       b"last"]
        assert broker.timer_service.cancelled_count == 1


def test_a_timer_past_the_roll_window_is_parked_and_put_back(tmp_path):
    with open_broker(tmp_path / "s", timer_roll_window_slots=2) as broker:
        start = now_ms()
        broker.send(timer("rolled", b"far", start + 3500, "0A" * 16), queue_id=0)
        views = delivered(broker, "rolled", 1)
        assert views[0].store_timestamp_ms >= start + 3500
        # parked at the end of the 2 s window, counted from the second it was read in, and put
        # back then: once, or once more when the rest is still 2 s or more (the moment falls in
        # the second after that window's end: it depends on the start's fraction of a second)
        rolls = int(views[0].properties["TIMER_ROLL_TIMES"])
        assert rolls in (1, 2)
        assert broker.store.max_offset(TIMER_TOPIC, 0) == 1 + rolls  # the record, its copies
    root = tmp_path / "s"
    assert (root / "timerwheel").stat().st_size == 38_707_200
    assert (root / "config" / "timercheck").stat().st_size == 4096
    assert [p.name for p in (root / "timerlog").iterdir()] == ["0" * 20]


def test_timer_log_files_of_delivered_timers_are_deleted(tmp_path):
    root = tmp_path / "s"
    with open_broker(root, timer_log_segment_size_bytes=4096) as broker:
        start = now_ms()
        for n in range(300):  # 52 bytes each: four files of 4 KiB
            broker.send(timer("cleanup", b"%d" % n, start + 300, f"{n:032X}"), queue_id=0)
        delivered(broker, "cleanup", 300)
        wait_until(lambda: len(list((root / "timerlog").iterdir())) == 1, 15,
                   "the timer-log files of delivered timers deleted, all but the last")
    with open_broker(root, timer_log_segment_size_bytes=4096) as broker:
        broker.send(timer("cleanup", b"after", now_ms() + 200, "F" * 32), queue_id=0)
        assert delivered(broker, "cleanup", 301)[-1].body == b"after"
        time.sleep(0.3)
        assert len(read_all(broker, "cleanup")) == 301  # nothing delivered again
