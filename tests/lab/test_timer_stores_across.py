"""Pending timers move with the store, both ways, through the timer wheel's files
(``timerwheel``, ``timerlog/``, ``config/timercheck``).

Apache writes, Postbox fires: the official Java producer sends timer messages 30–60 s ahead
(``setDelayTimeMs``) to Apache RocketMQ 5.3.3, the broker stops, and Postbox opens a copy of its
store: a ``postbox broker`` process reads the pending timers back from the wheel and is killed
with SIGKILL, then an embedded Postbox opens the store again and delivers each once, never
before the moment asked, those due once Postbox is open within the precision.

Postbox writes, Apache fires: Postbox stores timers 40–60 s ahead, one delivered already and
one cancelled by a delete marker of another second (which Apache alone would not match), then
closes; Apache starts on a copy of the folder and delivers the pending ones, once each, and
neither the delivered nor the cancelled one; those due once Apache is up within its
precision.
"""

from __future__ import annotations

import time

import pytest

from postbox.storage_engine import Broker, HAConfig, Message, StoreConfig
from tests.support.broker_process import BrokerProcess
from tests.support.polling import wait_until
from tests.support.rocketmq_lab import copy_store
from tests.support.rocketmq_processes import LAB_BROKER_SETTINGS, free_broker_ports

pytestmark = pytest.mark.peers

TOPIC = "LabTimerAcross"
PRECISION_MS = 1000
SLACK_MS = 1500
"""Lateness allowed past the precision on a loaded machine."""


def now_ms() -> int:
    return int(time.time() * 1000)


def pull_topic(lab, broker_name: str, queues: int = 1) -> list[dict]:
    pulled = lab.driver.run("pull", queues=[{"topic": TOPIC, "broker": broker_name,
                                             "queue_id": q} for q in range(queues)])
    return [m for m in pulled["messages"] if m["topic"] == TOPIC]


def test_apache_writes_pending_timers_and_postbox_fires_them(live_rocketmq, tmp_path):
    lab = live_rocketmq
    broker = lab.start_broker(tmp_path / "apache", name="lab-timer-aw")
    try:
        lab.driver.run("create-topic", broker_addr=broker.address,
                       topics=[{"topic": TOPIC, "queues": 1, "message_type": "DELAY"}])
        lab.driver.run("await-route", topics=[TOPIC], timeout_ms=60_000)
        sent = lab.driver.run("produce", sends=[
            {"message": {"topic": TOPIC, "tags": "timer", "keys": [f"t-{s}"],
                         "body": f"after {s} s", "delay_ms": s * 1000}} for s in (30, 45, 60)])
        time.sleep(1.0)  # the wheel's enqueue runs every 100 ms; the stop flushes it
    finally:
        exit_code = broker.stop()
    assert exit_code in (0, 143) and len(sent) == 3
    root = copy_store(broker.store_dir, tmp_path / "postbox")
    assert (root / "config" / "timercheck").is_file() and (root / "timerwheel").is_file()
    conf = tmp_path / "postbox-broker.conf"  # Apache's, but for its ports (no HA listener)
    conf.write_text("".join(line + "\n" for line in broker.conf_path.read_text().splitlines()
                            if not line.startswith(("haListenPort", "listenPort"))))
    crashed = BrokerProcess(root, broker_conf=conf)  # reads them back, then a kill -9
    try:
        crashed.start()
        wait_until(lambda: "pending timer records read back" in crashed.stderr_text(), 60,
                   "the postbox broker read the pending timers back",
                   detail=lambda: crashed.stderr_text()[-2000:])
    finally:
        crashed.kill()
    config = StoreConfig.from_broker_conf(broker.conf_path, root_dir=root,
                                          store_host=broker.address, ha=HAConfig())
    with Broker.open(config) as postbox:
        opened_ms = now_ms()
        service = postbox.timer_service
        views = wait_until(lambda: (v := postbox.pull("inspector", TOPIC, 0, 0, 8).messages)
                           and len(v) >= 3 and v, timeout_s=90, what="the timers",
                           detail=lambda: (service.failure, service.pending_count(),
                                           service.skipped_count, service.delivered_count))
        time.sleep(1.5)
        views = postbox.pull("inspector", TOPIC, 0, 0, 8).messages
        # the killed process delivers those due before its kill (a slow start on a loaded
        # machine can outlast the first 30 s); each is in the topic once either way (below)
        assert len(views) == 3 and service.skipped_count == 0
        records = postbox.pull("inspector", "rmq_sys_wheel_timer", 0, 0, 8).messages
    # Apache's moment: its clock at the put plus the delay (the store time is a little later)
    asked = {view.unique_key: view.store_timestamp_ms + int(view.properties["TIMER_DELAY_MS"])
             for view in records}
    assert sorted(asked) == sorted(result["msg_id"] for result in sent)
    assert sorted(view.unique_key for view in views) == sorted(asked)  # each once
    for view in views:
        late = view.store_timestamp_ms - asked[view.unique_key]
        assert late >= -50, (view.unique_key, late)  # never early (but for the put's own ms)
        if asked[view.unique_key] > opened_ms:
            assert late <= PRECISION_MS + SLACK_MS, (view.unique_key, late)
        assert "REAL_TOPIC" not in view.properties and "TIMER_DEQUEUE_MS" in view.properties


def write_pending_timers(root, store_host: str) -> dict:
    config = StoreConfig.from_broker_conf({**LAB_BROKER_SETTINGS, "storePathRootDir": str(root)},
                                          store_host=store_host, ha=HAConfig())
    start = now_ms()
    with Broker.open(config) as postbox:
        postbox.create_topic(TOPIC, 1)

        def timer(n: int, deliver_ms: int, **extra: str) -> str:
            key = f"50424F58{n:024X}"
            postbox.send(Message(TOPIC, f"timer {n}".encode(), unique_key=key, properties={
                "TIMER_DELIVER_MS": str(deliver_ms), **extra}), queue_id=0)
            return key

        asked = {timer(n, start + (40 + 10 * n) * 1000 + 137): start + (40 + 10 * n) * 1000 + 137
                 for n in range(3)}
        early = timer(10, start + 1000)
        cancelled = timer(11, start + 22_000)
        timer(12, start + 1500, TIMER_DEL_UNIQKEY=cancelled)
        wait_until(lambda: postbox.timer_service.delivered_count == 1, timeout_s=10,
                   what="the first timer")
        time.sleep(1.0)
        assert postbox.timer_service.cancelled_count == 1
        assert postbox.timer_service.pending_count() == 3
    return {"asked": asked, "early": early, "cancelled": cancelled}


def test_postbox_writes_pending_timers_and_apache_fires_them(live_rocketmq, tmp_path):
    lab = live_rocketmq
    ports = free_broker_ports()
    written = write_pending_timers(tmp_path / "postbox", f"127.0.0.1:{ports[0]}")
    copy = copy_store(tmp_path / "postbox", tmp_path / "apache")
    broker = lab.start_broker(copy, name="lab-timer-pw", ports=ports)
    up_ms = now_ms()
    try:
        lab.driver.run("await-route", topics=[TOPIC], timeout_ms=60_000)
        last = max(written["asked"].values())
        time.sleep(max(0.0, (last - now_ms()) / 1000) + PRECISION_MS / 1000 + 3)
        messages = pull_topic(lab, broker.name)
    finally:
        exit_code = broker.stop()
    assert exit_code in (0, 143)
    keys = [m["uniq_key"] for m in messages]
    assert keys.count(written["early"]) == 1  # delivered by Postbox, not again
    assert written["cancelled"] not in keys
    late = {m["uniq_key"]: m["store_timestamp"] - written["asked"][m["uniq_key"]]
            for m in messages if m["uniq_key"] in written["asked"]}
    assert sorted(late) == sorted(written["asked"]) and len(messages) == 4, messages
    assert all(ms >= 0 for ms in late.values()), late  # never early
    due_later = {key: ms for key, ms in late.items() if written["asked"][key] > up_ms}
    assert all(ms <= PRECISION_MS + SLACK_MS for ms in due_later.values()), (late, up_ms)
