"""Several consumer groups on one topic, end to end with the real framework: a stub is confirmed
only when every declared group handled its message, each group's dead letter raises its own
alert, and a message one group lost is resent to that group alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from postbox.framework import ConfigurationError
from postbox.outbox import Outbox
from postbox.outbox.alerts import AlertKind
from postbox.outbox.tables import StubStatus, message_stub
from tests.outbox.consumer_groups_scenario import GROUPS, KINDS, TOPIC, Played, play


@pytest.fixture
def played(tmp_path: Path, migrated_database_url: str, redis_url: str) -> Played:
    return play(tmp_path / "store", migrated_database_url, redis_url)


def stubs(database_url: str) -> dict[str, tuple[str, str | None, str | None]]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return {row.message_id: (row.status, row.last_error, row.expected_groups)
                    for row in connection.execute(select(
                        message_stub.c.message_id, message_stub.c.status,
                        message_stub.c.last_error, message_stub.c.expected_groups))}
    finally:
        engine.dispose()


def test_two_groups_one_dead_letters_one_loses(played: Played,
                                               migrated_database_url: str) -> None:
    rows = stubs(migrated_database_url)
    assert len(rows) == sum(KINDS.values())
    assert {expected for _, _, expected in rows.values()} == {"billing shipping"}
    # confirmed only where both groups handled the message (the lost one after its resend)
    for message_id in [*played.ids["ok"], played.one("lose")]:
        assert rows[message_id][0] == StubStatus.CONFIRMED
    poison, poison_both = played.one("poison"), played.one("poison_both")
    assert rows[poison][:2] == (StubStatus.VOID, "dead-lettered by consumer group shipping: "
                                f"shipping cannot take order {poison}")
    status, last_error = rows[poison_both][:2]
    assert status == StubStatus.VOID
    assert last_error is not None
    assert all(f"dead-lettered by consumer group {group}" in last_error for group in GROUPS)

    # one alert per (message, group) that dead-lettered it; nothing else (billing handled
    # the message shipping dead-lettered, and the lost message was not given up on)
    assert sorted((alert.kind, alert.message_id, alert.consumer_group)
                  for alert in played.alerts) == sorted([
        (AlertKind.DEAD_LETTERED, poison, "shipping"),
        (AlertKind.DEAD_LETTERED, poison_both, "billing"),
        (AlertKind.DEAD_LETTERED, poison_both, "shipping")])

    # the lost message went to shipping alone: billing saw every message exactly once
    lost = played.one("lose")
    assert played.deliveries.dropped == [lost]
    assert dict(played.deliveries.delivered["billing"]) == {
        message_id: 1 for ids in played.ids.values() for message_id in ids}
    assert played.deliveries.delivered["shipping"][lost] == 2
    assert played.handled["shipping"][lost] == 1 and played.handled["billing"][lost] == 1
    assert len(played.records[TOPIC]) == 1  # never resent to the whole topic
    [copy] = played.records["%RETRY%shipping"]
    assert copy.properties["RETRY_TOPIC"] == TOPIC
    assert played.records["%RETRY%billing"] == []


@pytest.mark.parametrize("groups", [{"orders": "billing"}, {"orders": []},
                                    {"orders": ["bad group"]}, {"": ["billing"]}])
def test_a_bad_declaration_is_refused(app, groups) -> None:
    with pytest.raises(ConfigurationError, match="consumer_groups"):
        Outbox(app, consumer_groups=groups)
