"""Transactions and timers side by side: the same scenario, in the same raw remoting frames
(``tests/lab/raw_side.py``), against an Apache RocketMQ 5.3.3 broker of the lab and a ``postbox
broker``, both with quick transaction checks (after 3 s, every 2 s, at most 2) and a timer roll
window of 20 s; the outcomes compared.

- Transactions: halves committed, rolled back, "unknown" then settled by the check-back (commit,
  rollback), and one answered "unknown" at every check until ``transactionCheckMax``: it is then
  discarded into ``TRANS_CHECK_MAX_TIME_TOPIC`` and checked no more. Bad ends in between: an
  unknown half, a check answer from another group's producer, a ``commitOrRollback`` that is not
  an end, and ends of already-ended halves. Compared: every response code, the checks each half
  got (with their ``TRANSACTION_CHECK_TIMES``), what consumers see, what was discarded.
  Difference (asserted, docs/remoting.md): an end of an already-ended half answers SUCCESS on
  both, but Apache commits the half again (a duplicate; a rolled-back message delivered), Postbox
  writes nothing.
- Timers at 1 s, 10 s, 25 s and 65 s ahead (the last two past the roll window: Apache rolls them,
  ``TIMER_ROLL_TIMES``), and bad timer properties (past ``timerMaxDelaySec``, garbage, what
  Java's ``Long.parseLong`` refuses or wraps): the same response codes, and every accepted
  message delivered once on both. Apache rounds a deliver time down to its 1 s precision and
  delivers within the next second; Postbox delivers at the millisecond: the deliveries agree
  within the precision.
- kill -9 of the ``postbox broker`` with a half pending and timers pending: after the restart
  the halves are checked again and settled, and every timer fires once.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.network.protocol.codes import ResponseCode
from postbox.storage_engine.formats.topic_names import TRANSACTION_CHECK_MAX_TIME_TOPIC
from tests.lab.raw_side import (
    APACHE_ONLY_SETTINGS,
    COMMIT,
    END,
    ROLLBACK,
    SHARED_SETTINGS,
    UNKNOWN,
    ApacheSide,
    CheckingProducer,
    PostboxSide,
    bodies,
    end,
    end_fields,
    pull_all,
    send,
    send_half,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

TX_TOPIC, TX_GROUP, OTHER_GROUP = "SideBySideTx", "side-tx", "side-tx-other"
CHECK_ANSWERS = {"C": COMMIT, "D": ROLLBACK}  # E: UNKNOWN at every check
QUIET_S = 5.0
"""After the discard: two more check intervals in which no check may come."""
DISCARDED_PROPERTIES = ("REAL_TOPIC", "REAL_QID", "PGROUP", "TRAN_MSG", "TRANSACTION_CHECK_TIMES",
                        "TAGS")


@pytest.fixture(scope="module")
def apache(live_rocketmq, tmp_path_factory):
    broker = live_rocketmq.start_broker(
        tmp_path_factory.mktemp("side-apache") / "store", name="lab-side-types",
        extra={**SHARED_SETTINGS, **APACHE_ONLY_SETTINGS})
    yield ApacheSide(broker.address)
    broker.stop()


@pytest.fixture
def postbox(tmp_path):
    side = PostboxSide(tmp_path / "postbox").start()
    yield side
    side.stop()


def discarded_halves(address: str) -> list[tuple[str, dict]]:
    """The halves of ``TX_TOPIC`` in ``TRANS_CHECK_MAX_TIME_TOPIC``: body, properties."""
    return [(record.body.decode(), {name: record.properties.get(name)
                                    for name in DISCARDED_PROPERTIES})
            for record in pull_all(address, TRANSACTION_CHECK_MAX_TIME_TOPIC)
            if record.properties.get("REAL_TOPIC") == TX_TOPIC]


def run_transactions(address: str) -> dict:
    codes: dict[str, int] = {}
    with (CheckingProducer(address, TX_GROUP, CHECK_ANSWERS) as producer,
          RawRemotingClient(address) as other):
        client = producer.client
        send(client, TX_TOPIC, "warm-up", {})  # the topic's creation is not in a half's time
        halves = {}
        for body in "ABCDEFGH":  # each ended at once: long before its first check is due
            halves[body] = send_half(client, TX_TOPIC, body, TX_GROUP)
            if body == "A":
                codes["commit"] = end(client, end_fields(halves["A"], COMMIT, TX_GROUP))
            elif body == "B":
                codes["rollback"] = end(client, end_fields(halves["B"], ROLLBACK, TX_GROUP))
            elif body in "CDEH":  # the local transaction does not know yet (sent oneway)
                client.oneway(END, end_fields(halves[body], UNKNOWN, TX_GROUP))
        codes["unknown half"] = end(client, end_fields(halves["C"], COMMIT, TX_GROUP,
                                                       commitLogOffset=10**9))
        codes["another group's check answer"] = end(other, end_fields(
            halves["C"], COMMIT, OTHER_GROUP, check=True))
        codes["commitOrRollback 4"] = end(client, end_fields(halves["C"], 4, TX_GROUP))
        codes["commit F"] = end(client, end_fields(halves["F"], COMMIT, TX_GROUP))
        codes["commit F again"] = end(client, end_fields(halves["F"], COMMIT, TX_GROUP))
        codes["rollback F after commit"] = end(client, end_fields(halves["F"], ROLLBACK,
                                                                  TX_GROUP))
        codes["rollback G"] = end(client, end_fields(halves["G"], ROLLBACK, TX_GROUP))
        codes["rollback G again"] = end(client, end_fields(halves["G"], ROLLBACK, TX_GROUP))
        codes["commit G after rollback"] = end(client, end_fields(halves["G"], COMMIT,
                                                                  TX_GROUP))
        wait_until(lambda: producer.checks_of("H"), 30, "the first check of H")
        codes["late commit of a checked half"] = end(client, end_fields(halves["H"], COMMIT,
                                                                        TX_GROUP))
        wait_until(lambda: "E" in dict(discarded_halves(address)), 90,
                   "the half answered UNKNOWN discarded", interval_s=0.5)
        time.sleep(QUIET_S)
        checks = {body: producer.checks_of(body) for body in "ABCDEFGH"}
    return {"codes": codes, "checks": checks, "discarded": discarded_halves(address),
            "delivered": Counter(body for body in bodies(pull_all(address, TX_TOPIC))
                                 if body != "warm-up")}


def both(function, *sides, **arguments) -> list:
    """``function(side.address, **arguments)`` on each side at once (the waits overlap)."""
    with ThreadPoolExecutor(len(sides)) as pool:
        return list(pool.map(lambda side: function(side.address, **arguments), sides))


def test_transactions_and_their_check_limit_match_apache(apache, postbox):
    theirs, ours = both(run_transactions, apache, postbox)
    print(f"transactions: apache {theirs}\npostbox {ours}")
    ok, error = ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR
    assert theirs["codes"] == {  # the scenario means what it says
        "commit": ok, "rollback": ok, "unknown half": error,
        "another group's check answer": error, "commitOrRollback 4": error, "commit F": ok,
        "commit F again": ok, "rollback F after commit": ok, "rollback G": ok,
        "rollback G again": ok, "commit G after rollback": ok,
        "late commit of a checked half": ok}
    assert ours["codes"] == theirs["codes"]
    expected_checks = {"A": [], "B": [], "C": ["1"], "D": ["1"], "E": ["1", "2"], "F": [],
                       "G": [], "H": ["1"]}
    assert ours["checks"] == expected_checks
    # Apache's op names the offset the commit named (the first copy): H's check copy stays
    # pending, is checked again and discarded, although H committed
    assert theirs["checks"] == {**expected_checks, "H": ["1", "2"]}
    discarded = {"REAL_TOPIC": TX_TOPIC, "REAL_QID": "0", "PGROUP": TX_GROUP, "TRAN_MSG": "true",
                 "TRANSACTION_CHECK_TIMES": "2", "TAGS": "tx"}
    assert ours["discarded"] == [("E", discarded)]
    assert sorted(theirs["discarded"]) == [("E", discarded), ("H", discarded)]
    assert ours["delivered"] == Counter({"A": 1, "C": 1, "F": 1, "H": 1})  # once, no more
    # Apache commits an ended half again: F twice, and G although it was rolled back
    assert theirs["delivered"] == Counter({"A": 1, "C": 1, "F": 2, "G": 1, "H": 1})


TIMER_TOPIC, MARKER_TOPIC = "SideBySideTimer", "SideBySideTimerMarker"
AHEAD_S = (1, 10, 25, 65)
ROLLED_S = (25, 65)
"""Past the 20-slot roll window: Apache parks them a window ahead and rolls them again."""
PRECISION_MS = 1000
SLACK_MS = 3000
"""Lateness beyond the precision a loaded machine may add."""
MAX_DELAY_S = 259_200  # timerMaxDelaySec's default on both brokers
MESSAGE_ILLEGAL = ResponseCode.MESSAGE_ILLEGAL


def bad_timers(now_ms: int) -> list[tuple[str, dict[str, str], int]]:
    """(name, properties, Apache's response code) of each bad or odd timer send."""
    return [
        ("past max", {"TIMER_DELIVER_MS": str(now_ms + (MAX_DELAY_S + 3600) * 1000)},
         MESSAGE_ILLEGAL),
        ("max + 1 s", {"TIMER_DELAY_SEC": str(MAX_DELAY_S + 1)}, MESSAGE_ILLEGAL),
        ("deliver garbage", {"TIMER_DELIVER_MS": "soon"}, MESSAGE_ILLEGAL),
        ("delay sec garbage", {"TIMER_DELAY_SEC": "1.5"}, MESSAGE_ILLEGAL),
        ("delay ms garbage", {"TIMER_DELAY_MS": "abc"}, MESSAGE_ILLEGAL),
        ("space", {"TIMER_DELAY_SEC": " 5"}, MESSAGE_ILLEGAL),
        ("underscore", {"TIMER_DELAY_SEC": "5_0"}, MESSAGE_ILLEGAL),
        ("past 64 bits", {"TIMER_DELIVER_MS": str(-(2**64))}, MESSAGE_ILLEGAL),
        ("late delete marker", {"TIMER_DEL_UNIQKEY": f"{TIMER_TOPIC}+X",
                                "TIMER_DELIVER_MS": str(now_ms - 5000)}, MESSAGE_ILLEGAL),
        ("plus sign", {"TIMER_DELAY_SEC": "+2"}, ResponseCode.SUCCESS),
        ("arabic digit", {"TIMER_DELAY_SEC": "\u0662"}, ResponseCode.SUCCESS),
        ("negative", {"TIMER_DELAY_SEC": "-5"}, ResponseCode.SUCCESS),
        ("overflow wraps", {"TIMER_DELAY_SEC": str(2**63 - 1)}, ResponseCode.SUCCESS),
        ("deliver in the past", {"TIMER_DELIVER_MS": str(now_ms - 5000)}, ResponseCode.SUCCESS),
        ("level wins", {"DELAY": "1", "TIMER_DELIVER_MS": "soon"}, ResponseCode.SUCCESS)]


def send_timers(address: str, start_ms: int) -> dict:
    """The timers (body ``t<seconds>``, due ``start_ms`` + that) and the bad sends."""
    codes = {}
    with RawRemotingClient(address) as client:
        for ahead in AHEAD_S:
            answer = send(client, TIMER_TOPIC, f"t{ahead}", {
                "UNIQ_KEY": f"t{ahead}-{start_ms}",
                "TIMER_DELIVER_MS": str(start_ms + ahead * 1000)})
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        for name, properties, _ in bad_timers(int(time.time() * 1000)):
            codes[name] = send(client, TIMER_TOPIC, name, properties).code
        codes["marker alone"] = send(client, MARKER_TOPIC, "marker alone", {
            "TIMER_DEL_UNIQKEY": f"{MARKER_TOPIC}+X"}).code
    return codes


def delivered_timers(address: str) -> dict[str, list]:
    records = pull_all(address, TIMER_TOPIC)
    grouped: dict[str, list] = {}
    for record in records:
        grouped.setdefault(record.body.decode(), []).append(record)
    return grouped


def test_timers_and_bad_timer_properties_match_apache(apache, postbox):
    start_ms = int(time.time() * 1000) + 1500  # both sends are done by then
    theirs, ours = both(send_timers, apache, postbox, start_ms=start_ms)
    print(f"timer send codes: apache {theirs}, postbox {ours}")
    expected = {name: code for name, _, code in bad_timers(0)}
    assert theirs == {**expected, "marker alone": ResponseCode.SUCCESS}
    assert ours == theirs
    accepted = sorted([name for name, code in expected.items() if code == ResponseCode.SUCCESS]
                      + [f"t{ahead}" for ahead in AHEAD_S])
    time.sleep(max(0.0, (start_ms + max(AHEAD_S) * 1000 - time.time() * 1000) / 1000))
    sides = {}
    for side in (apache, postbox):
        sides[side.name] = wait_until(lambda side=side: (
            found if sorted(found := delivered_timers(side.address)) == accepted else None),
            PRECISION_MS / 1000 + SLACK_MS / 1000 + 30, f"{side.name}: every timer delivered",
            interval_s=0.5, detail=lambda side=side: sorted(delivered_timers(side.address)))
    lateness = {name: {f"t{ahead}": seen[f"t{ahead}"][0].store_timestamp
                       - (start_ms + ahead * 1000) for ahead in AHEAD_S}
                for name, seen in sides.items()}
    print(f"timer lateness (ms): {lateness}")
    for name, seen in sides.items():
        assert all(len(records) == 1 for records in seen.values()), (name, seen)  # once each
    for body, late in lateness["postbox"].items():
        assert 0 <= late <= SLACK_MS, (body, late)  # never early
        assert abs(late - lateness["apache"][body]) <= PRECISION_MS + SLACK_MS
    for body, late in lateness["apache"].items():
        assert -PRECISION_MS <= late <= PRECISION_MS + SLACK_MS, (body, late)
    rolled = {body: records[0].properties.get("TIMER_ROLL_TIMES")
              for body, records in sides["apache"].items() if body.startswith("t")}
    assert {f"t{ahead}" for ahead in ROLLED_S} == {body for body, times in rolled.items()
                                                   if times}, rolled
    # a delete marker without a time: Apache stores it in its topic, Postbox keeps it as a
    # marker in the timer queue (never delivered)
    assert bodies(pull_all(apache.address, MARKER_TOPIC)) == ["marker alone"]
    assert bodies(pull_all(postbox.address, MARKER_TOPIC)) == []


CRASH_TOPIC, CRASH_GROUP = "SideBySideCrash", "side-crash"


def test_kill_9_with_pending_halves_and_timers_loses_nothing(tmp_path):
    side = PostboxSide(tmp_path / "postbox").start()
    try:
        with CheckingProducer(side.address, CRASH_GROUP, {}) as producer:
            halves = [send_half(producer.client, CRASH_TOPIC, body, CRASH_GROUP)
                      for body in ("K-commit", "K-rollback")]
            for half in halves:
                producer.client.oneway(END, end_fields(half, UNKNOWN, CRASH_GROUP))
            for ahead_ms in (1500, 20_000):  # one falls due while the broker is down
                send(producer.client, CRASH_TOPIC, f"timer-{ahead_ms}", {
                    "UNIQ_KEY": f"timer-{ahead_ms}",
                    "TIMER_DELAY_MS": str(ahead_ms)})
            side.kill()  # before the halves' first check is due (2 s), most likely
        side.start()
        answers = {"K-commit": COMMIT, "K-rollback": ROLLBACK}
        with CheckingProducer(side.address, CRASH_GROUP, answers) as producer:
            wait_until(lambda: producer.checks_of("K-commit") and producer.checks_of(
                "K-rollback"), 60, "the pending halves checked after the restart")
            expected = ["K-commit", "timer-1500", "timer-20000"]
            # generous waits: nine CI lanes share two cores beside this one (40 s ran out once)
            wait_until(lambda: bodies(pull_all(side.address, CRASH_TOPIC)) == expected, 90,
                       "the committed half and both timers delivered", interval_s=0.5,
                       detail=lambda: (f"delivered {bodies(pull_all(side.address, CRASH_TOPIC))}"
                                       f"; broker log:\n{side.log_tail()}"))
            time.sleep(QUIET_S)
            assert bodies(pull_all(side.address, CRASH_TOPIC)) == expected  # once each
            assert len(producer.checks_of("K-commit")) == 1  # settled by its first check
            assert len(producer.checks_of("K-rollback")) == 1
    finally:
        side.stop()
