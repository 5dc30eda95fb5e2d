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

from .common import (
    EXIT_NOT_FOUND,
    BrokerConfOption,
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
