"""``postbox store tour``: write orders into a fresh embedded store and prove every read path
works (the storage engine on its own; ``postbox demo`` is the whole framework).

The tour deletes and recreates its store directory (``./.postbox/tour-store`` by default) so every
run starts from nothing, but only when the directory is empty or looks like a store; anything
else is refused. It writes ``--messages`` orders to topic ``orders`` over four queues (batches of
ten per ``put_messages`` call, tags ``paid``/``refund``, key ``order-<n>``, a RocketMQ UNIQ_KEY
each), waits for dispatch, then reads everything back with ``get_message`` and checks sampled
orders through ``query_by_key``, ``query_by_unique_key``, ``view_message_by_id`` and
``offset_by_time``. Any failed check makes the exit code 1.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from postbox.storage_engine import (
    GetStatus,
    KeyIndexConfig,
    Message,
    MessageStore,
    MessageView,
    PutResult,
    SystemClock,
)
from postbox.storage_engine.formats import UniqueKeyGenerator

from .common import (
    DISPATCH_WAIT_MS,
    EXIT_NOT_FOUND,
    CliError,
    SegmentSizeOption,
    StoreOptions,
    build_config,
    out_console,
    reports_errors,
)
from .render import format_time_ms, messages_table

DEMO_STORE_DIR = Path(".postbox/tour-store")
DEMO_TOPIC = "orders"
DEMO_QUEUE_COUNT = 4
DEMO_BATCH_SIZE = 10
DEMO_CONSUMER_GROUP = "postbox-demo"
DEMO_MESSAGES_MAX = 1_000_000
READ_BATCH_MAX = 32
DEMO_SEGMENT_SIZE_BYTES = 64 << 20
DEMO_KEY_INDEX = KeyIndexConfig(slot_count_max=500_000, entry_count_max=2_000_000)
"""The demo's files: 64 MiB commit-log segments and a 42 MB key index instead of RocketMQ's
1 GiB and 420 MB defaults, so a first run does not reserve 1.5 GB of disk (files are
preallocated)."""
STORE_ENTRY_NAMES = frozenset({"commitlog", "consumequeue", "index", "checkpoint", "abort",
                               "lock", "config"})
"""Entries of a RocketMQ-layout store root; a directory holding one of them may be reset."""


@dataclasses.dataclass(frozen=True)
class WrittenOrder:
    """One order the demo stored, and where the store put it."""

    number: int
    key: str
    unique_key: str
    body: bytes
    result: PutResult


@dataclasses.dataclass(frozen=True)
class Check:
    """The outcome of one read-back check."""

    name: str
    detail: str
    ok: bool


@dataclasses.dataclass
class DemoReport:
    """Everything the demo prints at the end."""

    store_dir: Path
    orders: list[WrittenOrder]
    checks: list[Check]
    samples: list[MessageView]
    write_ms: int = 0
    read_ms: int = 0
    total_ms: int = 0


@reports_errors
def tour_command(
    store: Annotated[Path | None, typer.Option(
        "--store", metavar="DIR", file_okay=False, show_default=False,
        help=f"Demo store directory, deleted first \\[default: ./{DEMO_STORE_DIR}].")] = None,
    messages: Annotated[int, typer.Option(
        "--messages", min=1, max=DEMO_MESSAGES_MAX, help="How many orders to write.")] = 1000,
    segment_size: SegmentSizeOption = None,
) -> None:
    """Write orders into a fresh embedded store, read them back every way, show it worked."""
    store_dir = store or DEMO_STORE_DIR
    reset_store_dir(store_dir)
    config = build_config(StoreOptions(store_dir=store_dir,
                                       segment_size_bytes=segment_size or DEMO_SEGMENT_SIZE_BYTES))
    config = config.replace(key_index=DEMO_KEY_INDEX)
    console = out_console()
    started_ms = monotonic_ms()
    with MessageStore.open(config) as message_store:
        report = run_demo(message_store, store_dir, messages, console)
    report.total_ms = monotonic_ms() - started_ms
    render_report(console, report)
    if not all(check.ok for check in report.checks):
        raise typer.Exit(EXIT_NOT_FOUND)


def monotonic_ms() -> int:
    """Milliseconds from a monotonic clock (for elapsed times only)."""
    return time.monotonic_ns() // 1_000_000


def reset_store_dir(store_dir: Path) -> None:
    """Delete a previous demo store; refuse to delete anything that is not one."""
    if not store_dir.exists():
        return
    if not store_dir.is_dir():
        raise CliError(f"{store_dir} exists and is not a directory")
    entries = {entry.name for entry in store_dir.iterdir()}
    if entries and not entries & STORE_ENTRY_NAMES:
        raise CliError(f"refusing to delete {store_dir}: it is not empty and does not look "
                       "like a store (no commitlog/, consumequeue/, index/ or checkpoint)")
    shutil.rmtree(store_dir)


def run_demo(message_store: MessageStore, store_dir: Path, count: int,
             console: Console) -> DemoReport:
    """Write ``count`` orders, then run every read-back check."""
    started_ms = monotonic_ms()
    orders = write_orders(message_store, count, console)
    write_ms = monotonic_ms() - started_ms
    started_ms = monotonic_ms()
    checks = [check_dispatch(message_store)]
    checks += check_queues(message_store, orders)
    samples = sample_orders(orders)
    for order in samples:
        checks += check_queries(message_store, order)
    read_ms = monotonic_ms() - started_ms
    views = [message_store.read_message(order.result.log_position) for order in samples]
    return DemoReport(store_dir, orders, checks, views, write_ms=write_ms, read_ms=read_ms)


def order_message(number: int, unique_key: str) -> Message:
    """The demo's order ``number`` as a message."""
    tag = "refund" if number % 10 == 9 else "paid"
    body = json.dumps({"order": f"order-{number}", "status": tag,
                       "amount_cents": 500 + (number * 37) % 9_500}).encode()
    return Message(DEMO_TOPIC, body, tags=tag, keys=[f"order-{number}"], unique_key=unique_key)


def write_orders(message_store: MessageStore, count: int, console: Console) -> list[WrittenOrder]:
    """Store ``count`` orders in batches, round-robin over the demo's queues."""
    keys = UniqueKeyGenerator(ip="127.0.0.1", class_loader_hash=0x18B4AAC2)
    clock = SystemClock()
    orders: list[WrittenOrder] = []
    columns = (TextColumn("writing orders"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("write", total=count)
        for start in range(0, count, DEMO_BATCH_SIZE):
            numbers = range(start, min(start + DEMO_BATCH_SIZE, count))
            batch = [order_message(number, keys.next_key(clock.now_ms())) for number in numbers]
            queue_id = (start // DEMO_BATCH_SIZE) % DEMO_QUEUE_COUNT
            results = message_store.put_messages(batch, queue_id=queue_id)
            if len(results) != len(batch):
                raise CliError(f"put_messages stored {len(results)} of {len(batch)} messages")
            orders += [WrittenOrder(number, f"order-{number}", message.unique_key or "",
                                    message.body, result)
                       for number, message, result in zip(numbers, batch, results, strict=True)]
            progress.advance(task, len(batch))
    return orders


def same_message(order: WrittenOrder, view: MessageView) -> bool:
    """Whether a message read back is exactly the order that was written."""
    return (view.body == order.body and view.keys == [order.key]
            and view.unique_key == order.unique_key and view.topic == DEMO_TOPIC
            and view.queue_id == order.result.queue_id
            and view.queue_offset == order.result.queue_offset
            and view.log_position == order.result.log_position
            and view.msg_id == order.result.msg_id)


def check_dispatch(message_store: MessageStore) -> Check:
    """Consume queues and key index must catch up with the commit log."""
    ok = message_store.wait_dispatched(timeout_ms=DISPATCH_WAIT_MS)
    detail = "queues and key index caught up" if ok else f"not caught up in {DISPATCH_WAIT_MS} ms"
    return Check("wait_dispatched", detail, ok)


def read_queue(message_store: MessageStore, queue_id: int, expected_count: int
               ) -> list[MessageView]:
    """Every message of one demo queue, read from offset 0 with ``get_message``."""
    views: list[MessageView] = []
    offset = 0
    for _ in range(expected_count // READ_BATCH_MAX + 2):
        result = message_store.get_message(DEMO_CONSUMER_GROUP, DEMO_TOPIC, queue_id, offset,
                                           max_count=READ_BATCH_MAX)
        if result.status is not GetStatus.FOUND:
            break
        views += result.messages
        offset = result.next_offset
    return views


def check_queues(message_store: MessageStore, orders: list[WrittenOrder]) -> list[Check]:
    """Each queue must give back exactly its orders, in order."""
    checks = []
    for queue_id in range(DEMO_QUEUE_COUNT):
        expected = [order for order in orders if order.result.queue_id == queue_id]
        views = read_queue(message_store, queue_id, len(expected))
        wrong = [order.number for order, view in zip(expected, views, strict=False)
                 if not same_message(order, view)]
        detail = f"queue {queue_id}: read {len(views)} of {len(expected)}"
        if wrong:
            detail += f", {len(wrong)} differ (first order-{wrong[0]})"
        checks.append(Check("get_message", detail, len(views) == len(expected) and not wrong))
    return checks


def sample_orders(orders: list[WrittenOrder]) -> list[WrittenOrder]:
    """The first, middle and last order."""
    return [orders[index] for index in sorted({0, len(orders) // 2, len(orders) - 1})]


def check_queries(message_store: MessageStore, order: WrittenOrder) -> list[Check]:
    """Find one order by key, by unique key, by msg id and by store time."""
    position = order.result.log_position
    by_key = message_store.query_by_key(DEMO_TOPIC, order.key)
    by_unique_key = message_store.query_by_unique_key(DEMO_TOPIC, order.unique_key)
    by_id = message_store.view_message_by_id(order.result.msg_id)
    return [
        Check("query_by_key", f"{order.key} → {len(by_key)} message(s)",
              [view.log_position for view in by_key] == [position]),
        Check("query_by_unique_key", f"{order.unique_key} → {len(by_unique_key)} message(s)",
              [view.log_position for view in by_unique_key] == [position]),
        Check("view_message_by_id", f"{order.result.msg_id} → {order.key}",
              by_id is not None and same_message(order, by_id)),
        check_by_time(message_store, order),
    ]


def check_by_time(message_store: MessageStore, order: WrittenOrder) -> Check:
    """``offset_by_time`` at an order's store time must land on a message stored then."""
    queue_id, stored_ms = order.result.queue_id, order.result.store_timestamp_ms
    offset = message_store.offset_by_time(DEMO_TOPIC, queue_id, stored_ms)
    result = message_store.get_message(DEMO_CONSUMER_GROUP, DEMO_TOPIC, queue_id, offset,
                                       max_count=1)
    found = result.messages[0] if result.status is GetStatus.FOUND and result.messages else None
    detail = f"queue {queue_id} at {format_time_ms(stored_ms)} → offset {offset}"
    return Check("offset_by_time", detail,
                 found is not None and found.store_timestamp_ms == stored_ms)


def written_table(orders: list[WrittenOrder]) -> Table:
    """Per queue: how many orders went in and the offsets they got."""
    table = Table(title=f"written to topic {DEMO_TOPIC}", box=box.SIMPLE_HEAVY)
    for name in ("queue", "messages", "first offset", "last offset", "first msg id"):
        if name == "first msg id":
            table.add_column(name, overflow="fold", min_width=len(name))
        else:
            table.add_column(name, justify="right")
    for queue_id in range(DEMO_QUEUE_COUNT):
        results = [order.result for order in orders if order.result.queue_id == queue_id]
        if results:
            table.add_row(str(queue_id), str(len(results)), str(results[0].queue_offset),
                          str(results[-1].queue_offset), results[0].msg_id)
    return table


def checks_table(checks: list[Check]) -> Table:
    """One row per check, with a green tick or a red cross."""
    table = Table(title="read-back checks", box=box.SIMPLE_HEAVY)
    table.add_column("check", style="bold")
    table.add_column("detail", overflow="fold")
    table.add_column("ok", justify="center")
    for check in checks:
        mark = Text("✓", style="green") if check.ok else Text("✗ FAILED", style="bold red")
        table.add_row(check.name, Text(check.detail), mark)
    return table


def render_report(console: Console, report: DemoReport) -> None:
    """Tables, then one line of figures."""
    console.print(written_table(report.orders))
    console.print(messages_table(report.samples, title="sample orders, read by position",
                                 width=console.width))
    console.print(checks_table(report.checks))
    failed = sum(1 for check in report.checks if not check.ok)
    count = len(report.orders)
    rate = count * 1000 // max(report.write_ms, 1)
    console.print(
        f"{count} messages · {DEMO_QUEUE_COUNT} queues · write {report.write_ms} ms "
        f"({rate} msg/s) · read-back {report.read_ms} ms · total {report.total_ms} ms · "
        f"store {report.store_dir}", highlight=False, markup=False, soft_wrap=True)
    if failed:
        console.print(f"[bold red]{failed} of {len(report.checks)} checks failed[/]")
    else:
        console.print(f"[green]all {len(report.checks)} checks passed[/]")
