"""Per consumer group metric families: lag per queue, handler outcomes, handler latency.

Outcome counters come from each ``Consumer``'s ``ConsumeStats`` and the latency tallies of its
``ConsumeService`` (per handler topic); lag is asked of the broker at scrape time
(``consumer_progress``: its max offset minus the group's committed offset, per queue), so a
remote broker is asked once per group and scrape. A broker that cannot answer leaves the lag
out of that scrape (logged) rather than failing the whole scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from .families import Metric, counter, gauge, histogram

log = logging.getLogger(__name__)

OUTCOMES = (
    ("handled", "handled", "Messages whose handler call succeeded (or that middleware "
                           "finished without it, as duplicates)."),
    ("failed", "failed", "Messages whose handler call failed (then retried, dead-lettered or, "
                         "for broadcast groups, dropped)."),
    ("retried", "retried", "Messages sent back for a later retry (or, orderly, retried in "
                           "place)."),
    ("dead_lettered", "dead_lettered", "Messages sent to the group's dead-letter queue."),
)


def consumer_families(consumers: Iterable[Any], client: Any) -> list[Metric]:
    """The families of an app's running consumers (``Consumer`` objects)."""
    consumers = [consumer for consumer in consumers if consumer.consume is not None]
    families: list[Metric] = []
    for suffix, field, documentation in OUTCOMES:
        families.append(counter(
            f"postbox_consumer_{suffix}", documentation, ["group"],
            [((c.group,), getattr(c.consume.stats, field)) for c in consumers]))
    families.append(gauge("postbox_consumer_in_flight_messages", "Messages pulled and not yet "
                          "finished.", ["group"],
                          [((c.group,), c.in_flight_count()) for c in consumers]))
    families.append(histogram(
        "postbox_consumer_handler_seconds", "Duration of handler calls, middleware included.",
        ["group", "topic"], [((c.group, topic), tally.snapshot()) for c in consumers
                             for topic, tally in sorted(c.consume.handler_latency.items())]))
    families.append(gauge("postbox_consumer_lag_messages", "Messages in a queue the group has "
                          "not committed: the broker's max offset minus the committed offset.",
                          ["group", "topic", "queue"], _lags(consumers, client)))
    return families


def _lags(consumers: list[Any], client: Any) -> list[tuple[tuple[str, str, str], int]]:
    samples: list[tuple[tuple[str, str, str], int]] = []
    for group in sorted({consumer.group for consumer in consumers}):
        try:
            progress = client.consumer_progress(group)
        except Exception as error:  # a broker that cannot answer must not fail the scrape
            log.warning("[metrics] lag of group %s unavailable: %s", group, error)
            continue
        samples.extend(((group, queue.topic, str(queue.queue_id)), queue.lag)
                       for queue in progress)
    return samples


__all__ = ["consumer_families"]
