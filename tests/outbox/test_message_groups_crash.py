"""Message groups through a real ``kill -9`` of a relay and a real broker outage.

A relay in a child process publishes interleaved stubs of three message groups to a ``postbox
broker`` process and is killed (SIGKILL) right after the broker stored one of them, before it
could record it: that stub is stored but unrecorded, the stubs it had claimed with it are
leased to a dead relay. Then the broker process stops while more stubs are committed, and comes
back on the same store and ports. A relay in this process publishes everything: each group in
send order (the stub stored by the killed relay once more, at-least-once), no attempt counted.

The test starts its own broker process (it stops and restarts it), so it uses no ``store``
fixture and runs in the embedded pass only; about 25 s (two broker starts), so it is ``slow``
(``make test-slow``): ``test_message_groups.py`` covers the same states in ``make test`` (an
abandoned claim, an unreachable broker) in a second.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from postbox import outbox
from postbox.framework import App
from postbox.outbox import Relay, RelayOptions
from postbox.outbox.clock import utc_now
from postbox.storage_engine.formats.constants import PROPERTY_SHARDING_KEY
from tests.outbox.conftest import stored_records, stub_rows
from tests.outbox.test_relay_outage import RestartableBroker
from tests.support.polling import wait_until

TOPIC = "order-events"
GROUPS = ("g0", "g1", "g2")
LEASE_MS = 2_000

DOOMED_RELAY = """
import os, signal, sys
from postbox.framework import App
from postbox.outbox import Relay, RelayOptions, create_database_engine

store_url, database_url, last_body, lease_ms = sys.argv[1:5]
app = App(store_url=store_url)


class KilledAfter:
    '''The app's producer, killing this process (SIGKILL) once the broker stored last_body.'''

    def __init__(self, producer):
        self.producer = producer

    def send(self, topic, body, **options):
        result = self.producer.send(topic, body, **options)
        if body == last_body.encode():
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def send_batch(self, topic, messages, **options):
        return self.producer.send_batch(topic, messages, **options)


relay = Relay(lambda: KilledAfter(app.producer), create_database_engine(database_url),
              options=RelayOptions(lease_ms=int(lease_ms)), owner="doomed")
while True:
    relay.publish_due()
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RestartableBroker]:
    server = RestartableBroker(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def commit(engine: Engine, sent: dict[str | None, list[str]], rounds: range) -> None:
    """Each round: one stub per group and one without, each in its own transaction."""
    for number in rounds:
        for group in (*GROUPS, None):
            body = f"{group or 'free'}-{number}"
            with engine.begin() as connection:
                outbox.send(connection, TOPIC, body, message_group=group,
                            now=utc_now() - timedelta(milliseconds=1))
            sent[group].append(body)


@pytest.mark.slow
def test_each_group_keeps_its_order_through_a_relay_kill_and_a_broker_outage(
        server: RestartableBroker, engine: Engine, migrated_database_url: str):
    sent: dict[str | None, list[str]] = defaultdict(list)
    commit(engine, sent, range(4))
    doomed = subprocess.run(
        [sys.executable, "-c", DOOMED_RELAY, server.store_url, migrated_database_url, "g0-2",
         str(LEASE_MS)], capture_output=True, text=True, timeout=120, check=False)
    assert doomed.returncode == -9, doomed.stderr  # killed, as kill -9 does
    leased = [row["content"] for row in stub_rows(engine)
              if row["lease_owner"] is not None and row["published_at"] is None]
    assert b"g0-2" in leased  # stored by the broker, never recorded

    server.stop()  # the broker goes away too; sends go on
    commit(engine, sent, range(4, 6))
    app = App(store_url=server.store_url)
    try:
        relay = Relay(app.producer, engine, options=RelayOptions(
            outage_backoff_ms=20, outage_backoff_max_ms=200, poll_interval_ms=50))
        assert relay.publish_due() == 0
        server.start()

        def drained() -> bool:
            relay.publish_due()
            return all(row["published_at"] is not None for row in stub_rows(engine))

        wait_until(drained, timeout_s=60, what="every stub published after the outage",
                   detail=lambda: [(row["content"], row["lease_owner"], row["last_error"])
                                   for row in stub_rows(engine) if row["published_at"] is None])
        stored: dict[str | None, list[str]] = defaultdict(list)
        for view in stored_records(app.client, TOPIC):
            stored[view.properties.get(PROPERTY_SHARDING_KEY)].append(view.body.decode())
    finally:
        app.stop()
    assert stored["g0"] == [*sent["g0"][:3], *sent["g0"][2:]]  # g0-2 twice, then in order
    for group in ("g1", "g2"):
        assert stored[group] == sent[group]
    assert sorted(stored[None]) == sorted(sent[None])
    assert all(row["send_count"] == 1 for row in stub_rows(engine))  # nothing counted twice
