"""Orderly consumption: one queue at a time, in order; failures retry in place."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict

from postbox.framework import App, ConsumerOptions
from postbox.framework.testing import InlineRunner
from tests.support.polling import wait_until


def _send_sharded(app: App, accounts: int, per_account: int) -> dict[str, list[str]]:
    expected: dict[str, list[str]] = defaultdict(list)
    for step in range(per_account):
        for account in range(accounts):
            body = f"acct-{account}:{step}"
            app.producer.send("ledger", body, sharding_key=f"acct-{account}")
            expected[f"acct-{account}"].append(body)
    return expected


def test_orderly_retries_in_place_and_never_reorders(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock)
    app = App(broker=client(broker), clock=fake_clock)
    log: list[tuple[str, int]] = []
    failures = defaultdict(int)

    @app.handler(topic="ledger", consumer_group="posting", orderly=True)
    def post(message):
        log.append((message.text, message.reconsume_count))
        if message.text.endswith(":3") and failures[message.text] < 3:
            failures[message.text] += 1
            raise RuntimeError("transient")

    expected = _send_sharded(app, accounts=5, per_account=8)
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()

    by_account: dict[str, list[str]] = defaultdict(list)
    for text, _ in log:
        account = text.split(":")[0]
        if not by_account[account] or by_account[account][-1] != text:
            by_account[account].append(text)
    assert dict(by_account) == dict(expected)  # each account's messages in send order
    retried = [(text, count) for text, count in log if text.endswith(":3")]
    for account in range(5):
        attempts = [count for text, count in retried if text == f"acct-{account}:3"]
        assert attempts == [0, 1, 2, 3]  # retried in place with growing counts
    assert broker.dead_letters("posting") == []
    assert broker.store.max_offset("%RETRY%posting", 0) == 0  # no send-back for orderly


def test_orderly_with_threads_keeps_per_key_order(open_broker, client):
    broker = open_broker()
    options = ConsumerOptions(orderly_suspend_ms=30, long_polling_ms=200)
    app = App(broker=client(broker), consumer_options=options)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()
    failed_once: set[str] = set()

    @app.handler(topic="ledger", consumer_group="posting", orderly=True)
    def post(message):
        account, step = message.text.split(":")
        if step == "5" and account not in failed_once:
            failed_once.add(account)
            raise RuntimeError("once")
        with lock:
            seen[account].append(int(step))
            if sum(map(len, seen.values())) == 6 * 20:
                done.set()

    app.start()
    _send_sharded(app, accounts=6, per_account=20)
    assert done.wait(20)
    app.stop()
    for account, steps in seen.items():
        assert steps == list(range(20)), account


def test_orderly_gives_up_after_reconsume_count_max(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock)
    app = App(broker=client(broker), clock=fake_clock)
    seen: list[str] = []

    @app.handler(topic="ledger", consumer_group="posting", orderly=True, reconsume_count_max=2)
    def post(message):
        seen.append(message.text)
        if message.text == "bad":
            raise RuntimeError("never works")

    for body in ("a", "bad", "c"):
        app.producer.send("ledger", body, sharding_key="k")
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()
    assert seen == ["a", "bad", "bad", "bad", "c"]
    assert [v.body for v in broker.dead_letters("posting")] == [b"bad"]


def test_orderly_order_holds_across_a_rebalance(open_broker, client):
    broker = open_broker()
    options = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=50)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def post(message):
        account, step = message.text.split(":")
        with lock:
            seen[account].append(int(step))

    def start_app() -> App:
        app = App(broker=client(broker), consumer_options=options)
        app.handler(topic="ledger", consumer_group="posting", orderly=True)(post)
        return app.start()

    first = start_app()
    producer = first.producer
    for step in range(30):
        for account in range(6):
            producer.send("ledger", f"acct-{account}:{step}", sharding_key=f"acct-{account}")
        if step == 10:
            second = start_app()
    wait_until(lambda: all(len(set(seen[f"acct-{a}"])) == 30 for a in range(6)), 20,
               "every step of every account", detail=lambda: dict(seen))
    second.stop()
    first.stop()
    for account, steps in seen.items():
        firsts = list(dict.fromkeys(steps))  # a hand-over may replay a tail, never reorder
        assert firsts == list(range(30)), account
        for earlier, later in itertools.pairwise(steps):
            assert later == earlier + 1 or later <= earlier, (account, steps)
