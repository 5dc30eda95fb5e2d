"""``postbox consumer …``: how far consumer groups have got (committed offset, max offset, lag).

Read from the store's ``config/consumerOffset.json`` (loaded when the store opens) through
``Broker.consumer_progress``: one row per queue of every topic a group committed on, plus its
retry topic ``%RETRY%group``. Lag counts from the committed offset, or from the queue's min
offset where the group never committed. A group is known when the broker knows it (committed
offsets or a subscription group); an unknown group, or no group at all, is "nothing found"
(exit code 1).

The command opens the store read-only and a broker over it (``open_broker``), reads, and drops
both: it commits no offsets and writes nothing, so it works beside a running broker or
application (offsets are those it last persisted, every few seconds). With ``--broker`` it asks a
running broker instead (GET_CONSUME_STATS, ``remote``).

``reset`` moves a group's committed offsets on one topic to a time, by the rules of ``mqadmin
resetOffsetByTime``: each queue's new offset is the first one stored at or after the time
(SEARCH_OFFSET_BY_TIMESTAMP; past the queue's end, its max offset); with ``--force`` (the
default) every queue is set, without it only queues whose committed offset is past the new one
are rolled back. The group's consumers must be stopped: an embedded store is opened writable
(refused while an application holds it), and over ``--broker`` a group with live consumers is
refused (a running consumer would commit its own position over the reset).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Broker, QueueProgress
from postbox.storage_engine.contract.model import ConsumeFrom

from .common import (
    EXIT_NOT_FOUND,
    BrokerConfOption,
    CliError,
    JsonOption,
    SegmentSizeOption,
    StoreDirOption,
    StoreOptions,
    open_broker,
    out_console,
    print_json,
    print_note,
    reports_errors,
)
from .remote import (
    AccessKeyOption,
    BrokerUrlOption,
    SecretKeyOption,
    remote_broker,
)
from .render import cell

consumer_app = typer.Typer(name="consumer", help="Inspect consumer groups.",
                           no_args_is_help=True)


@dataclasses.dataclass(frozen=True)
class GroupProgress:
    """One group's position on each of its queues, sorted by (topic, queue id)."""

    group: str
    queues: list[QueueProgress]

    @property
    def total_lag(self) -> int:
        """Messages the group has not consumed yet, over all its queues."""
        return sum(queue.lag for queue in self.queues)

    def document(self) -> dict[str, Any]:
        """The JSON document of the group: totals, then one record per queue."""
        return {
            "group": self.group, "queue_count": len(self.queues), "total_lag": self.total_lag,
            "queues": [{"topic": queue.topic, "queue_id": queue.queue_id,
                        "committed_offset": queue.committed_offset,
                        "min_offset": queue.min_offset, "max_offset": queue.max_offset,
                        "lag": queue.lag} for queue in self.queues],
        }


def read_progress(broker: Broker | RemotingBroker, group: str | None) -> list[GroupProgress]:
    """The progress of ``group``, or of every group the broker knows; [] when it knows none
    (or not ``group``)."""
    if group is None:
        return [GroupProgress(name, broker.consumer_progress(name))
                for name in broker.consumer_groups()]
    queues = broker.consumer_progress(group)  # validates the name first
    if group not in broker.consumer_groups():
        return []
    return [GroupProgress(group, queues)]


def progress_table(progress: GroupProgress) -> Table:
    """One row per queue, lagging queues in yellow, totals in the footer."""
    table = Table(title=Text(f"group {progress.group}"), box=box.SIMPLE_HEAVY,
                  show_footer=True)
    table.add_column("topic", footer=f"total ({len(progress.queues)} queues)")
    for name in ("queue", "committed", "min offset", "max offset"):
        table.add_column(name, justify="right")
    table.add_column("lag", justify="right", footer=str(progress.total_lag))
    for queue in progress.queues:
        table.add_row(cell(queue.topic), str(queue.queue_id), cell(queue.committed_offset),
                      str(queue.min_offset), str(queue.max_offset), str(queue.lag),
                      style="yellow" if queue.lag else None)
    return table


@consumer_app.command("progress")
@reports_errors
def progress_command(
    group: Annotated[str | None, typer.Option(
        "--group", "-g", metavar="GROUP", show_default=False,
        help="Only this consumer group \\[default: every group the broker knows].")] = None,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Committed offset, max offset and lag per (topic, queue), with totals per group."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    with (remote_broker(broker_url, access_key, secret_key) if broker_url is not None
          else open_broker(options)) as broker:
        groups = read_progress(broker, group)
    if json_output:
        print_json([progress.document() for progress in groups])
    else:
        console = out_console()
        for progress in groups:
            console.print(progress_table(progress))
    if not groups:
        print_note(f"no consumer group {group!r}: no committed offsets, no subscription"
                   if group is not None else "no consumer groups in this store")
        raise typer.Exit(EXIT_NOT_FOUND)


OFFSET_LOOKUP_GROUP = "postbox-cli"
"""The group named in offset-by-time lookups: it never commits, so the broker answers with the
time rule instead of a committed offset."""


@dataclasses.dataclass(frozen=True)
class OffsetReset:
    """What a reset did to one queue: committed offset before (None: never) and after."""

    topic: str
    queue_id: int
    before: int | None
    after: int | None

    @property
    def changed(self) -> bool:
        """Whether the committed offset moved."""
        return self.before != self.after

    def document(self) -> dict[str, Any]:
        """The JSON record of the queue."""
        return {"topic": self.topic, "queue_id": self.queue_id, "before": self.before,
                "after": self.after, "changed": self.changed}


def reset_offsets_by_time(broker: Broker | RemotingBroker, group: str, topic: str,
                          timestamp_ms: int, *, force: bool = True) -> list[OffsetReset]:
    """Set ``group``'s committed offset on every queue of ``topic`` to the first offset stored
    at or after ``timestamp_ms`` (``mqadmin resetOffsetByTime``); without ``force`` only a
    queue committed past that offset is moved back. A group with live consumers is refused."""
    if timestamp_ms < 0:
        raise CliError(f"the time must be an epoch ms >= 0, got {timestamp_ms}")
    if broker.consumer_ids(group):
        raise CliError(f"group {group} has live consumers: stop them first (a running "
                       "consumer commits its own position over a reset)")
    queue_ids = broker.queue_ids(topic)
    if not queue_ids:
        raise CliError(f"no topic {topic!r}")
    resets = []
    for queue_id in queue_ids:
        target = broker.start_offset(OFFSET_LOOKUP_GROUP, topic, queue_id,
                                     ConsumeFrom.TIMESTAMP, timestamp_ms)
        before = broker.query_offset(group, topic, queue_id)
        after = before
        if force or before is None or target < before:
            broker.commit_offset(group, topic, queue_id, target)
            after = target
        resets.append(OffsetReset(topic, queue_id, before, after))
    return resets


@consumer_app.command("reset")
@reports_errors
def reset_command(
    group: Annotated[str, typer.Option("--group", "-g", metavar="GROUP", show_default=False,
                                       help="The consumer group whose offsets to move.")],
    topic: Annotated[str, typer.Option("--topic", "-t", metavar="TOPIC", show_default=False,
                                       help="The topic whose queues to reset.")],
    timestamp_ms: Annotated[int, typer.Option(
        "--time", metavar="MS", show_default=False,
        help="Epoch ms: each queue goes to the first message stored at or after it.")],
    force: Annotated[bool, typer.Option(
        "--force/--no-force", help="Set every queue (default); --no-force only rolls back "
                                   "queues committed past the time.")] = True,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Reset a stopped group's committed offsets on a topic to a time (mqadmin
    resetOffsetByTime)."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    with (remote_broker(broker_url, access_key, secret_key) if broker_url is not None
          else open_broker(options, writable=True)) as broker:
        resets = reset_offsets_by_time(broker, group, topic, timestamp_ms, force=force)
    if json_output:
        print_json([reset.document() for reset in resets])
        return
    console = out_console()
    for reset in resets:
        console.print(f"{reset.topic} queue {reset.queue_id}: {cell(reset.before)} → "
                      f"{cell(reset.after)}{'' if reset.changed else ' (unchanged)'}",
                      highlight=False)
