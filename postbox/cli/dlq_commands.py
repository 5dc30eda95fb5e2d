"""``postbox dlq …``: list a consumer group's dead letters and re-send them to that group.

A group's dead letters are the messages ``Broker.send_back`` moved to ``%DLQ%group`` queue 0
once their retries ran out (or at once, ``delay_level < 0``). Each keeps the topic it first
failed on in its ``RETRY_TOPIC`` property and, when the consumer gave one, why in
``DLQ_REASON``.

``resend`` stores a new copy of each chosen dead letter for the dead-lettering group only
(``Broker.resend_dead_letter``: in ``%RETRY%group`` with ``RETRY_TOPIC`` = the original topic, so
the group's consumers get it again under that topic and no other group sees it; reconsume count
0, ``DLQ_ORIGIN_MESSAGE_ID`` naming the dead-letter record) and marks it re-sent in the store's
``config/dlqResends.json``: ``dlq list`` shows the mark (how often, when last). The dead-letter
queue is a log and keeps its records, so re-sending the same offset twice sends the message
twice. ``resend`` changes the store, so it opens it writable: while a broker or application
holds the store it is refused, naming ``--broker``. Explicit ``--offset`` values are all checked
before anything is sent: an offset with no dead letter sends nothing and exits with code 1. An
error part-way through names how many messages were already re-sent.

"Nothing found" (no dead letters, offsets that hold none) exits with code 1; bad arguments and
storage errors print one ``error:`` line and exit with code 2.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Broker, MessageView, SendResult, StorageError
from postbox.storage_engine.broker.dlq_resends import ResendMark
from postbox.storage_engine.contract.send_back import reason_fingerprint, reason_shape
from postbox.storage_engine.formats import (
    PROPERTY_DLQ_FINGERPRINT,
    PROPERTY_DLQ_REASON,
    PROPERTY_RETRY_TOPIC,
)
from postbox.storage_engine.formats.topic_names import is_dead_letter_topic

from .common import (
    EXIT_NOT_FOUND,
    BrokerConfOption,
    CliError,
    JsonOption,
    SegmentSizeOption,
    StoreDirOption,
    StoreOptions,
    err_console,
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
    remote_resend_marks,
    resend_remotely,
)
from .render import body_preview, cell, format_time_ms, message_document

dlq_app = typer.Typer(name="dlq", help="List and re-send a consumer group's dead letters.",
                      no_args_is_help=True)

"""Why a message was dead-lettered (``Broker.send_back(..., reason=...)``)."""
DLQ_PAGE_SIZE = 256
"""Dead letters read per ``Broker.dead_letters`` call (the broker allows up to 1024)."""
LIST_LIMIT_DEFAULT = 100

GroupOption = Annotated[str, typer.Option(
    "--group", "-g", metavar="GROUP", show_default=False,
    help="Consumer group whose %DLQ%group to read.")]


AnyBroker = Broker | RemotingBroker


def iter_dead_letters(broker: AnyBroker, group: str, offset: int,
                      page_size: int = DLQ_PAGE_SIZE) -> Iterator[MessageView]:
    """The group's dead letters from ``offset`` (raised to the queue's min offset), in order."""
    while True:
        page = broker.dead_letters(group, offset=offset, max_count=page_size)
        if not page:
            return
        yield from page
        offset = page[-1].queue_offset + 1


def original_topic(view: MessageView) -> str | None:
    """The topic the dead letter first failed on (``RETRY_TOPIC``)."""
    return view.properties.get(PROPERTY_RETRY_TOPIC)


def failure_class(view: MessageView) -> tuple[str, str]:
    """(fingerprint, shape) of why a dead letter failed: its ``DLQ_FINGERPRINT`` (or the one
    its ``DLQ_REASON`` gives, for dead letters stored before the property existed) and the
    reason with its varying parts blanked; ("", "") when it carries no reason."""
    reason = view.properties.get(PROPERTY_DLQ_REASON)
    if not reason:
        return "", ""
    return (view.properties.get(PROPERTY_DLQ_FINGERPRINT) or reason_fingerprint(reason),
            reason_shape(reason))


def dead_letter_document(view: MessageView, mark: ResendMark | None) -> dict[str, Any]:
    """``message_document`` plus ``original_topic``, ``reason`` and ``resent`` (how often and
    when last it was re-sent; None when absent or never)."""
    return {**message_document(view), "original_topic": original_topic(view),
            "reason": view.properties.get(PROPERTY_DLQ_REASON),
            "resent": None if mark is None else mark.document()}


def resent_cell(mark: ResendMark | None) -> str:
    """``2× 2026-11-29 01:02:03`` or an em dash."""
    return "—" if mark is None else f"{mark.count}× {format_time_ms(mark.last_ms)}"


def dead_letters_table(views: list[MessageView], marks: dict[int, ResendMark],
                       title: str) -> Table:
    """One dead letter per row: DLQ offset, UNIQ_KEY, original topic, reason, resent, body..."""
    table = Table(title=Text(title), box=box.SIMPLE_HEAVY)
    table.add_column("dlq offset", justify="right", no_wrap=True)
    table.add_column("message id", no_wrap=True)
    table.add_column("original topic")
    table.add_column("reconsumes", justify="right")
    table.add_column("reason", overflow="fold")
    table.add_column("store time", no_wrap=True)
    table.add_column("resent", no_wrap=True)
    table.add_column("body", overflow="ellipsis", no_wrap=True)
    for view in views:
        table.add_row(str(view.queue_offset), cell(view.unique_key), cell(original_topic(view)),
                      str(view.reconsume_count), cell(view.properties.get(PROPERTY_DLQ_REASON)),
                      format_time_ms(view.store_timestamp_ms),
                      resent_cell(marks.get(view.queue_offset)), body_preview(view.body))
    return table


def check_offset(name: str, value: int) -> int:
    """``value`` if it is a queue offset (>= 0), else a ``CliError`` naming the option."""
    if value < 0:
        raise CliError(f"{name} must be >= 0, got {value}")
    return value


@dlq_app.command("list")
@reports_errors
def list_command(
    group: GroupOption,
    offset: Annotated[int, typer.Option(
        "--offset", metavar="N", help="First DLQ queue offset to show.")] = 0,
    limit: Annotated[int, typer.Option(
        "--limit", metavar="N", help="At most N dead letters (0 = all).")]
    = LIST_LIMIT_DEFAULT,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """List a group's dead letters: offset, UNIQ_KEY, original topic, reason, resent, body."""
    check_offset("--offset", offset)
    if limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all), got {limit}")
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    with (remote_broker(broker_url, access_key, secret_key) if broker_url is not None
          else open_broker(options)) as broker:
        pages = iter_dead_letters(broker, group, offset, min(limit or DLQ_PAGE_SIZE,
                                                             DLQ_PAGE_SIZE))
        views = list(itertools.islice(pages, limit) if limit else pages)
        marks = (broker.dlq_resends.marks(group) if isinstance(broker, Broker)
                 else remote_resend_marks(broker, group, views))
    if json_output:
        print_json([dead_letter_document(view, marks.get(view.queue_offset)) for view in views])
    elif views:
        table = dead_letters_table(views, marks, f"dead letters of {group}: {len(views)}")
        if limit and len(views) == limit:
            table.caption = (f"limit {limit} reached; continue with "
                             f"--offset {views[-1].queue_offset + 1}")
        out_console().print(table)
    if not views:
        print_note(f"no dead letters of group {group} from offset {offset}")
        raise typer.Exit(EXIT_NOT_FOUND)


def offsets_to_resend(broker: AnyBroker, group: str, offsets: list[int],
                      resend_all: bool) -> tuple[list[MessageView], list[int]]:
    """The dead letters to re-send, and the asked-for offsets that hold no dead letter. With
    ``resend_all`` every dead letter from ``offsets[0]`` (or 0)."""
    if resend_all:
        start = offsets[0] if offsets else 0
        return list(iter_dead_letters(broker, group, start)), []
    found, missing = [], []
    for offset in dict.fromkeys(offsets):  # each offset once, in the order given
        page = broker.dead_letters(group, offset=offset, max_count=1)
        if page and page[0].queue_offset == offset:
            found.append(page[0])
        else:
            missing.append(offset)
    return found, missing


def resend_document(dead_letter: MessageView, receipt: SendResult) -> dict[str, Any]:
    """Where one dead letter was re-sent to (the group's retry topic) and for which topic."""
    return {"dlq_offset": dead_letter.queue_offset, "dlq_msg_id": dead_letter.msg_id,
            "topic": receipt.topic, "original_topic": original_topic(dead_letter),
            "queue_id": receipt.queue_id, "queue_offset": receipt.queue_offset,
            "log_position": receipt.log_position, "msg_id": receipt.offset_msg_id,
            "unique_key": receipt.unique_key, "status": receipt.status.value}


def resend_line(document: dict[str, Any]) -> Text:
    """``dlq offset 3 → %RETRY%g queue 0 offset 12 (for orders)  msg id …  unique key …``."""
    line = (f"dlq offset {document['dlq_offset']} → {document['topic']} queue "
            f"{document['queue_id']} offset {document['queue_offset']} (for "
            f"{document['original_topic']})  msg id "
            f"{document['msg_id']}  unique key {document['unique_key'] or '—'}")
    if document["status"] != "PUT_OK":
        line += f"  ({document['status']})"
    return Text(line)


def resend_one(broker: AnyBroker, group: str, dead_letter: MessageView) -> SendResult:
    """Re-send one dead letter (embedded: marked; remote: ``resend_remotely``)."""
    if isinstance(broker, Broker):
        return broker.resend_dead_letter(group, dead_letter.queue_offset)
    target = original_topic(dead_letter)
    if not target or is_dead_letter_topic(target):
        raise CliError(f"dead letter at offset {dead_letter.queue_offset} has no "
                       f"{PROPERTY_RETRY_TOPIC}: its original topic is unknown")
    return resend_remotely(broker, group, dead_letter, target)


def resend_each(broker: AnyBroker, group: str, targets: list[MessageView],
                console: Console, show_lines: bool) -> list[dict[str, Any]]:
    """Re-send every target under a progress bar (on a terminal); a storage error names what
    was already re-sent."""
    documents: list[dict[str, Any]] = []
    columns = (TextColumn(f"re-sending dead letters of {group}"), BarColumn(),
               MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("resend", total=len(targets))
        for dead_letter in targets:
            try:
                receipt = resend_one(broker, group, dead_letter)
            except (StorageError, CliError) as error:
                done = ", ".join(str(document["dlq_offset"]) for document in documents)
                raise CliError(f"{error} (re-sent {len(documents)} of {len(targets)} before "
                               f"it{': dlq offsets ' + done if done else ''})") from error
            documents.append(resend_document(dead_letter, receipt))
            if show_lines:
                progress.console.print(resend_line(documents[-1]), highlight=False)
            progress.advance(task)
    return documents


@dlq_app.command("resend")
@reports_errors
def resend_command(
    group: GroupOption,
    offsets: Annotated[list[int] | None, typer.Option(
        "--offset", metavar="N", show_default=False,
        help="DLQ queue offset to re-send (repeatable); with --all, the first one.")] = None,
    resend_all: Annotated[bool, typer.Option(
        "--all", help="Re-send every dead letter of the group from --offset (default 0).")]
    = False,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Re-send dead letters to the group that dead-lettered them (its %RETRY% topic, under
    their original topic) and mark them re-sent; prints where each one went.

    The DLQ keeps its records: re-sending an offset twice sends the message twice.
    """
    offsets = [check_offset("--offset", offset) for offset in offsets or []]
    if not offsets and not resend_all:
        raise CliError("give --offset N (repeatable) or --all")
    if resend_all and len(offsets) > 1:
        raise CliError("--all takes at most one --offset (the first DLQ offset to re-send)")
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    with (remote_broker(broker_url, access_key, secret_key) if broker_url is not None
          else open_broker(options, writable=True)) as broker:
        targets, missing = offsets_to_resend(broker, group, offsets, resend_all)
        documents: list[dict[str, Any]] = []
        if targets and not missing:
            console = err_console() if json_output else out_console()
            documents = resend_each(broker, group, targets, console,
                                    show_lines=not json_output)
    if json_output:
        print_json(documents)
    if missing:
        print_note(f"no dead letter of group {group} at offset(s) "
                   f"{', '.join(map(str, missing))}; nothing re-sent")
        raise typer.Exit(EXIT_NOT_FOUND)
    if not targets:
        print_note(f"no dead letters of group {group} from offset {offsets[0] if offsets else 0}")
        raise typer.Exit(EXIT_NOT_FOUND)
    if not json_output:
        out_console().print(f"re-sent {len(documents)} dead letter(s) of {group}; the DLQ keeps "
                            "them (re-sending again sends again)", highlight=False)
