"""``postbox transactions …``: an operator's view of transactional (half) messages.

- ``list``: the pending halves — transactions whose producer has not said commit or rollback
  yet — with their message id, producer group, real topic, age (since the producer sent the
  half), how often the broker checked back and, over a store, when the next check falls due.
- ``discarded``: the halves the broker gave up on after ``transactionCheckMax`` checks. Like
  Apache RocketMQ, the broker keeps them in ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 with their
  ``REAL_TOPIC``/``REAL_QID``; ``in topic`` says whether a message with the same ``UNIQ_KEY``
  is in the real topic already (committed by a resend, or by an end that came too late).
- ``resend``: commit discarded halves by hand (an operator who learned that their local
  transactions committed): each goes to its real topic and queue, as a commit would have put
  it. One already in its topic is refused unless ``--force`` (the discarded topic is a log and
  keeps its records, so a forced resend sends the message again).

Over a store directory the pending halves are the broker's own (``Broker.transactions``: found
again from the half and op topics as at start-up); ``resend`` opens the store writable, so it is
refused while a broker or application holds it, naming ``--broker``. Over ``--broker
rocketmq://…`` they are worked out the same way from pulls of ``RMQ_SYS_TRANS_HALF_TOPIC`` and
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` from the progress offsets of ``CID_RMQ_SYS_TRANS`` (nothing is
committed), and a resend is an ordinary send to the real topic and queue.

"Nothing found" exits with code 1; bad arguments and storage errors print one ``error:`` line
and exit with code 2.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from postbox.network.client.errors import RemotingClientError, RouteNotFoundError
from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Broker, Message, MessageView, SendResult
from postbox.storage_engine.broker.transactions import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    committed_message,
    op_offsets,
    transaction_key,
)
from postbox.storage_engine.formats.topic_names import (
    TRANSACTION_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_GROUP,
    TRANSACTION_HALF_TOPIC,
    TRANSACTION_OP_TOPIC,
)

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
from .remote import AccessKeyOption, BrokerUrlOption, SecretKeyOption, remote_broker
from .render import body_preview, cell, format_time_ms, message_document

transactions_app = typer.Typer(
    name="transactions", no_args_is_help=True,
    help="Pending transactional (half) messages, and the ones discarded after too many checks.")

AnyBroker = Broker | RemotingBroker
READ_GROUP = "postbox-cli"
"""The group named in pulls (they commit nothing)."""
PAGE = 32
TRANSACTION_SYS_FLAG_MASK = 0x0C

LimitOption = Annotated[int, typer.Option(
    "--limit", metavar="N", help="At most N messages (0 = all).")]


def remote_errors(command: Callable[..., None]) -> Callable[..., None]:
    """A remoting client's error (no name server, a refused request) as a ``CliError``."""
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except RemotingClientError as error:
            raise CliError(str(error)) from error

    return wrapper


def broker_for(options: StoreOptions, broker_url: str | None, access_key: str | None,
               secret_key: str | None, *, writable: bool = False):
    """The store's broker, or a remote one for ``--broker``."""
    if broker_url is not None:
        return remote_broker(broker_url, access_key, secret_key)
    return open_broker(options, writable=writable)


def read_queue(broker: AnyBroker, topic: str, offset: int) -> Iterator[MessageView]:
    """Every message of ``topic`` queue 0 from ``offset`` (raised to the queue's minimum)."""
    while True:
        if isinstance(broker, Broker):
            start = max(offset, broker.store.min_offset(topic, 0))
            result = broker.store.get_message(READ_GROUP, topic, 0, start, PAGE)
        else:
            try:
                result = broker.pull(READ_GROUP, topic, 0, offset, PAGE)
            except RouteNotFoundError:  # never written: the broker has no such topic yet
                return
        if not result.messages:
            return
        yield from result.messages
        offset = result.next_offset


def progress(broker: RemotingBroker, topic: str) -> int:
    """Where the broker's own reading of ``topic`` queue 0 stands (``CID_RMQ_SYS_TRANS``)."""
    try:
        return broker.query_offset(TRANSACTION_GROUP, topic, 0) or 0
    except RouteNotFoundError:
        return 0


def pending_halves(broker: AnyBroker) -> list[tuple[MessageView, int | None]]:
    """(latest copy, next check due ms or None when unknown) of each pending half, by queue
    offset."""
    if isinstance(broker, Broker):
        return [(broker.store.read_message(half.log_position), half.due_ms)
                for half in broker.transactions.halves.pending()]
    half_start, op_start = (progress(broker, TRANSACTION_HALF_TOPIC),
                            progress(broker, TRANSACTION_OP_TOPIC))
    ended: set[int] = set()
    for op in read_queue(broker, TRANSACTION_OP_TOPIC, op_start):
        ended.update(op_offsets(op.body))
    latest: dict[str, MessageView] = {}
    ended_keys: set[str] = set()
    for view in read_queue(broker, TRANSACTION_HALF_TOPIC, half_start):
        key = transaction_key(view)
        if view.queue_offset in ended:
            ended_keys.add(key)
        latest[key] = view
    return sorted(((view, None) for key, view in latest.items() if key not in ended_keys),
                  key=lambda pair: pair[0].queue_offset)


def check_times(view: MessageView) -> int:
    """How often the broker checked back about the half (``TRANSACTION_CHECK_TIMES``)."""
    text = view.properties.get(PROPERTY_CHECK_TIMES, "0")
    return int(text) if text.isdigit() else 0


def half_document(view: MessageView, due_ms: int | None, now_ms: int) -> dict[str, Any]:
    """``message_document`` plus what an operator asks about a half."""
    return {**message_document(view), "producer_group": view.properties.get(
        PROPERTY_PRODUCER_GROUP), "real_topic": view.properties.get(PROPERTY_REAL_TOPIC),
        "real_queue_id": view.properties.get(PROPERTY_REAL_QID),
        "age_ms": max(0, now_ms - view.born_timestamp_ms), "check_times": check_times(view),
        "next_check_ms": due_ms}


def format_age(age_ms: int) -> str:
    """``3 h 05 min``, ``4 min 07 s``, ``12.3 s``."""
    seconds = age_ms // 1000
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{age_ms / 1000:.1f} s"


def halves_table(documents: list[dict[str, Any]], views: list[MessageView], title: str,
                 *, discarded: bool) -> Table:
    """One half per row; the last column is the next check (pending) or "in topic"."""
    table = Table(title=Text(title), box=box.SIMPLE_HEAVY)
    table.add_column("offset", justify="right", no_wrap=True)
    table.add_column("message id", no_wrap=True)
    table.add_column("producer group")
    table.add_column("real topic")
    table.add_column("age", justify="right", no_wrap=True)
    table.add_column("checks", justify="right")
    table.add_column("in topic" if discarded else "next check", no_wrap=True)
    table.add_column("body", overflow="ellipsis", no_wrap=True)
    for document, view in zip(documents, views, strict=True):
        if discarded:
            last = "yes" if document["in_topic"] else "no"
        else:
            due = document["next_check_ms"]
            last = "—" if due is None else format_time_ms(due)
        table.add_row(str(view.queue_offset), cell(view.unique_key),
                      cell(document["producer_group"]), cell(document["real_topic"]),
                      format_age(document["age_ms"]), str(document["check_times"]), last,
                      body_preview(view.body))
    return table


def print_halves(documents: list[dict[str, Any]], views: list[MessageView], title: str, *,
                 json_output: bool, discarded: bool, limit: int) -> None:
    """The documents as JSON, or the table."""
    if json_output:
        print_json(documents)
        return
    table = halves_table(documents, views, title, discarded=discarded)
    if limit and len(views) == limit:
        table.caption = f"limit {limit} reached"
    out_console().print(table)


def check_limit(limit: int) -> int:
    """``limit`` if it is >= 0, else a ``CliError``."""
    if limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all), got {limit}")
    return limit


@transactions_app.command("list")
@reports_errors
@remote_errors
def list_command(
    limit: LimitOption = 100,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """List pending halves: offset, message id, producer group, real topic, age, checks."""
    check_limit(limit)
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    with broker_for(options, broker_url, access_key, secret_key) as broker:
        pending = pending_halves(broker)
    pending = pending[:limit] if limit else pending
    now_ms = int(time.time() * 1000)
    documents = [half_document(view, due, now_ms) for view, due in pending]
    if not pending:
        print_note("no pending half messages")
        raise typer.Exit(EXIT_NOT_FOUND)
    print_halves(documents, [view for view, _ in pending],
                 f"pending half messages: {len(pending)}", json_output=json_output,
                 discarded=False, limit=limit)


def discarded_halves(broker: AnyBroker, offset: int, limit: int) -> list[MessageView]:
    """At most ``limit`` (0: all) discarded halves from ``offset``."""
    found = []
    for view in read_queue(broker, TRANSACTION_CHECK_MAX_TIME_TOPIC, offset):
        found.append(view)
        if limit and len(found) == limit:
            break
    return found


def in_real_topic(broker: AnyBroker, view: MessageView) -> bool:
    """Whether the real topic holds a message with the discarded half's ``UNIQ_KEY``."""
    topic = view.properties.get(PROPERTY_REAL_TOPIC)
    if not topic or not view.unique_key:
        return False
    return bool(broker.find_by_unique_key(topic, view.unique_key))


def discarded_document(broker: AnyBroker, view: MessageView, now_ms: int) -> dict[str, Any]:
    """``half_document`` plus ``in_topic``."""
    return {**half_document(view, None, now_ms), "in_topic": in_real_topic(broker, view)}


@transactions_app.command("discarded")
@reports_errors
@remote_errors
def discarded_command(
    offset: Annotated[int, typer.Option(
        "--offset", metavar="N", help=f"First {TRANSACTION_CHECK_MAX_TIME_TOPIC} offset.")] = 0,
    limit: LimitOption = 100,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """List halves discarded after transactionCheckMax checks (TRANS_CHECK_MAX_TIME_TOPIC)."""
    check_limit(limit)
    if offset < 0:
        raise CliError(f"--offset must be >= 0, got {offset}")
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    now_ms = int(time.time() * 1000)
    with broker_for(options, broker_url, access_key, secret_key) as broker:
        views = discarded_halves(broker, offset, limit)
        documents = [discarded_document(broker, view, now_ms) for view in views]
    if not views:
        print_note(f"no discarded half messages from offset {offset}")
        raise typer.Exit(EXIT_NOT_FOUND)
    print_halves(documents, views, f"discarded half messages: {len(views)}",
                 json_output=json_output, discarded=True, limit=limit)


def resend_one(broker: AnyBroker, view: MessageView) -> SendResult:
    """Commit the discarded half ``view`` to its real topic and queue."""
    if isinstance(broker, Broker):
        return broker.transactions.resend_discarded(view.queue_offset)
    message, queue_id = committed_message(view)
    plain = Message(message.topic, message.body, tags=message.tags, keys=message.keys,
                    properties=message.properties, unique_key=message.unique_key,
                    flag=message.flag, born_timestamp_ms=message.born_timestamp_ms,
                    sys_flag=message.sys_flag & ~TRANSACTION_SYS_FLAG_MASK)
    return broker.send(plain, queue_id=queue_id)


def resend_document(view: MessageView, receipt: SendResult) -> dict[str, Any]:
    """Where one discarded half went."""
    return {"discarded_offset": view.queue_offset, "unique_key": view.unique_key,
            "topic": receipt.topic, "queue_id": receipt.queue_id,
            "queue_offset": receipt.queue_offset, "msg_id": receipt.offset_msg_id,
            "status": receipt.status.value}


def targets_of(broker: AnyBroker, offsets: list[int], resend_all: bool
               ) -> tuple[list[MessageView], list[int]]:
    """The discarded halves to resend and the asked-for offsets that hold none."""
    if resend_all:
        return discarded_halves(broker, offsets[0] if offsets else 0, 0), []
    found, missing = [], []
    for offset in dict.fromkeys(offsets):
        page = discarded_halves(broker, offset, 1)
        if page and page[0].queue_offset == offset:
            found.append(page[0])
        else:
            missing.append(offset)
    return found, missing


@transactions_app.command("resend")
@reports_errors
@remote_errors
def resend_command(
    offsets: Annotated[list[int] | None, typer.Option(
        "--offset", metavar="N", show_default=False,
        help="Offset of a discarded half to commit (repeatable); with --all, the first.")]
    = None,
    resend_all: Annotated[bool, typer.Option(
        "--all", help="Every discarded half from --offset (default 0).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Also those already in their real topic (sends them again).")] = False,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Commit discarded halves by hand: each goes to its real topic and queue."""
    offsets = list(offsets or [])
    if any(offset < 0 for offset in offsets):
        raise CliError(f"--offset must be >= 0, got {min(offsets)}")
    if not offsets and not resend_all:
        raise CliError("give --offset N (repeatable) or --all")
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    documents: list[dict[str, Any]] = []
    with broker_for(options, broker_url, access_key, secret_key, writable=True) as broker:
        targets, missing = targets_of(broker, offsets, resend_all)
        if missing:
            print_note(f"no discarded half at offset(s) {', '.join(map(str, missing))}; "
                       "nothing resent")
            raise typer.Exit(EXIT_NOT_FOUND)
        present = [view.queue_offset for view in targets if in_real_topic(broker, view)]
        if present and not force:
            raise CliError(f"offset(s) {', '.join(map(str, present))} already in their real "
                           "topic (give --force to send them again); nothing resent")
        for view in targets:
            documents.append(resend_document(view, resend_one(broker, view)))
    if not targets:
        print_note("no discarded half messages")
        raise typer.Exit(EXIT_NOT_FOUND)
    if json_output:
        print_json(documents)
        return
    for document in documents:
        out_console().print(f"offset {document['discarded_offset']} → {document['topic']} "
                            f"queue {document['queue_id']} offset {document['queue_offset']}  "
                            f"unique key {document['unique_key'] or '—'}", highlight=False)
