"""``postbox store …``: look at a store as a whole (verify, stats, topics and queues, the raw log).

Each command opens the store read-only (no lock, no recovery, nothing written: it works while a
broker or an application is writing the store, and shows it as it was when opened), reads, and
closes it. A directory that is not a store is refused ("not a store", exit code 2) with nothing
written into it. ``stats`` and ``topics`` also ask a running broker (``--broker``, ``remote``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from postbox.network.client.inspect_calls import InspectCalls
from postbox.storage_engine import MessageStore, MessageView, verify_store
from postbox.storage_engine.formats.engine import ENGINE

from .common import (
    BrokerConfOption,
    JsonOption,
    SegmentSizeOption,
    StoreDirOption,
    StoreOptions,
    build_config,
    inspected_store,
    open_store,
    out_console,
    print_json,
    reports_errors,
)
from .remote import AccessKeyOption, BrokerUrlOption, SecretKeyOption, remote_broker
from .render import message_document, messages_table, stats_tables

store_app = typer.Typer(name="store", help="Inspect a message store.", no_args_is_help=True)

DUMP_LIMIT_DEFAULT = 100


@store_app.command("verify")
@reports_errors
def verify_command(store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
                   segment_size: SegmentSizeOption = None, json_output: JsonOption = False) -> None:
    """Check that commit log, consume queues and key index agree (read-only; exit 1 if not)."""
    config = build_config(StoreOptions(store, broker_conf, segment_size, json_output))
    inspected_store(config.root_dir)
    problems = verify_store(config.root_dir, config)
    if json_output:
        print_json({"store": str(config.root_dir), "problems": problems})
    else:
        console = out_console()
        for problem in problems:
            console.print(f"[red]problem[/red] {problem}", highlight=False)
        console.print(f"{len(problems)} problem(s) in {config.root_dir}")
    if problems:
        raise typer.Exit(1)


@store_app.command("stats")
@reports_errors
def stats_command(store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
                  segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
                  broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
                  secret_key: SecretKeyOption = None) -> None:
    """Show the store's figures: commit-log positions, segments, queues, key index (with
    --broker: every master's runtime table, as `mqadmin brokerStatus` shows it)."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:
        with remote_broker(broker_url, access_key, secret_key) as remote:
            stats: dict[str, Any] = {"brokers": InspectCalls(remote.context).runtime_info()}
    else:
        with open_store(options) as message_store:  # and the engine this process runs
            stats = {"engine": ENGINE, **message_store.stats()}
    if json_output:
        print_json(stats)
        return
    console = out_console()
    for table in stats_tables(stats):
        console.print(table)


def topic_documents(message_store: MessageStore) -> list[dict[str, Any]]:
    """Every topic with its queues and their offset ranges, sorted by topic then queue."""
    documents = []
    for topic, queue_ids in sorted(message_store.topics().items()):
        queues = [{"queue_id": queue_id,
                   "min_offset": message_store.min_offset(topic, queue_id),
                   "max_offset": message_store.max_offset(topic, queue_id)}
                  for queue_id in sorted(queue_ids)]
        documents.append({"topic": topic, "queues": queues})
    return documents


def topics_table(documents: list[dict[str, Any]]) -> Table:
    """One row per (topic, queue) with min/max offsets and the message count between them."""
    table = Table(title="topics", box=box.SIMPLE_HEAVY)
    for name in ("topic", "queue", "min offset", "max offset", "messages"):
        table.add_column(name, justify="left" if name == "topic" else "right")
    for document in documents:
        for queue in document["queues"]:
            table.add_row(document["topic"], str(queue["queue_id"]), str(queue["min_offset"]),
                          str(queue["max_offset"]),
                          str(queue["max_offset"] - queue["min_offset"]))
    return table


@store_app.command("topics")
@reports_errors
def topics_command(store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
                   segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
                   broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
                   secret_key: SecretKeyOption = None) -> None:
    """List topics and their queues with min/max offsets."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:
        with remote_broker(broker_url, access_key, secret_key) as remote:
            documents = InspectCalls(remote.context).topic_offsets()
    else:
        with open_store(options) as message_store:
            documents = topic_documents(message_store)
    if json_output:
        print_json(documents)
    else:
        out_console().print(topics_table(documents))


def select_messages(message_store: MessageStore, topic: str | None, limit: int,
                    from_position: int) -> Iterator[MessageView]:
    """Messages in log order from ``from_position``, of one topic if given, at most ``limit``
    (0 = no limit)."""
    views = message_store.iter_messages(start_position=from_position)
    if topic is not None:
        views = (view for view in views if view.topic == topic)
    return itertools.islice(views, limit) if limit else views


@store_app.command("dump")
@reports_errors
def dump_command(
    topic: Annotated[str | None, typer.Option("--topic", help="Only this topic.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="At most N messages (0 = all).")]
    = DUMP_LIMIT_DEFAULT,
    from_position: Annotated[int, typer.Option(
        "--from-position", min=0, help="Start at this commit-log position.")] = 0,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
) -> None:
    """Print decoded commit-log records in log order."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    with open_store(options) as message_store:
        views = list(select_messages(message_store, topic, limit, from_position))
    if json_output:
        print_json([message_document(view) for view in views])
        return
    console = out_console()
    table = messages_table(views, title=f"commit log from position {from_position}",
                           width=console.width)
    if limit and len(views) == limit:
        last = views[-1]
        notes = [table.caption] if table.caption else []
        notes.append(f"limit {limit} reached; continue with "
                     f"--from-position {last.log_position + last.store_size}")
        table.caption = "\n".join(str(note) for note in notes)
    console.print(table)
