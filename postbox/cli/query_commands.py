"""``postbox query …``: find messages by id (offsetMsgId or UNIQ_KEY), key, unique key, queue
offset or time. The store is opened read-only (works beside a running broker or application);
with ``--broker`` every query asks a running broker instead (``remote``).

Single-message results are shown as a vertical table of every field, lists as a compact table;
``--json`` prints message documents (``MessageView.as_dict()`` plus the body). A query that finds
nothing says so on stderr and exits with code 1; malformed input exits with code 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from postbox.network.client.admin_calls import AdminCalls
from postbox.network.client.inspect_calls import InspectCalls
from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import (
    GetResult,
    GetStatus,
    MessageNotFoundError,
    MessageStore,
    MessageView,
)
from postbox.storage_engine.contract.model import ConsumeFrom
from postbox.storage_engine.errors import InvalidMessageIdError

from .common import (
    EXIT_NOT_FOUND,
    BrokerConfOption,
    CliError,
    JsonOption,
    SegmentSizeOption,
    StoreDirOption,
    StoreOptions,
    open_store,
    out_console,
    print_json,
    print_note,
    reports_errors,
)
from .remote import AccessKeyOption, BrokerUrlOption, SecretKeyOption, remote_broker
from .render import message_detail_table, message_document, messages_table

query_app = typer.Typer(name="query", help="Find messages in a store.", no_args_is_help=True)

CLI_CONSUMER_GROUP = "postbox-cli"
"""Consumer group named in reads made by the command line (reads record no offsets)."""

TopicArg = Annotated[str, typer.Argument(help="Topic name.")]
QueueIdArg = Annotated[int, typer.Argument(min=0, help="Queue id.")]


def show_message(view: MessageView | None, options: StoreOptions, title: str,
                 reason: str = "") -> None:
    """Print one message (or ``null``); exit 1 when there is none."""
    if options.json_output:
        print_json(None if view is None else message_document(view))
    elif view is not None:
        out_console().print(message_detail_table(view, title=title))
    if view is None:
        print_note(f"no message: {title}{': ' if reason else ''}{reason}")
        raise typer.Exit(EXIT_NOT_FOUND)


def show_messages(views: list[MessageView], options: StoreOptions, title: str) -> None:
    """Print a list of messages; exit 1 when it is empty."""
    if options.json_output:
        print_json([message_document(view) for view in views])
    elif views:
        console = out_console()
        console.print(messages_table(views, title=f"{title}: {len(views)} message(s)",
                                     width=console.width))
    if not views:
        print_note(f"no messages: {title}")
        raise typer.Exit(EXIT_NOT_FOUND)


def message_at(get_message: Callable[..., GetResult], topic: str, queue_id: int,
               offset: int) -> tuple[GetStatus, MessageView | None, dict[str, Any]]:
    """The message at ``offset`` of a queue, read with ``get_message`` (a store's, or a remote
    broker's ``pull``, which commits nothing): (status, message or None, the queue's range)."""
    result = get_message(CLI_CONSUMER_GROUP, topic, queue_id, offset, max_count=1)
    view = result.messages[0] if result.status is GetStatus.FOUND and result.messages else None
    queue_range = {"min_offset": result.min_offset, "max_offset": result.max_offset,
                   "next_offset": result.next_offset}
    return result.status, view, queue_range


def find_by_id(message_store: MessageStore, msg_id: str,
               topic: str | None) -> tuple[MessageView | None, list[MessageView], str]:
    """The message ``msg_id`` names, as an offsetMsgId or else as a UNIQ_KEY (the id
    ``outbox.send`` and producers return), with the other records carrying that UNIQ_KEY
    (retry and dead-letter copies); (None, [], why) when neither finds one."""
    try:
        return message_store.view_message_by_id(msg_id), [], ""
    except (MessageNotFoundError, InvalidMessageIdError) as error:
        reason = str(error)
    topics = [topic] if topic is not None else sorted(message_store.topics())
    found = sorted((view for name in topics
                    for view in message_store.query_by_unique_key(name, msg_id)),
                   key=lambda view: view.log_position)
    if not found:
        return None, [], f"{reason}; no message has it as its UNIQ_KEY either"
    return found[0], found[1:], ""


def find_remotely(remote: RemotingBroker, msg_id: str, topic: str | None
                  ) -> tuple[MessageView | None, list[MessageView], str]:
    """``find_by_id`` through a broker: VIEW_MESSAGE_BY_ID for an offsetMsgId, else the UNIQ_KEY
    in ``topic`` (a remote broker has no one index over every topic, so it is needed)."""
    try:
        view = InspectCalls(remote.context).view_message_by_id(msg_id)
    except ValueError:
        view = None
    if view is not None:
        return view, [], ""
    if topic is None:
        raise CliError(f"{msg_id!r} is no offsetMsgId the brokers know; to look it up as a "
                       "UNIQ_KEY through --broker, give --topic")
    found = remote.find_by_unique_key(topic, msg_id)
    return (found[0] if found else None), found[1:], f"no UNIQ_KEY {msg_id} in {topic}"


@query_app.command("id")
@reports_errors
def query_id_command(
    msg_id: Annotated[str, typer.Argument(
        metavar="MSG_ID", help="offsetMsgId (32/56 hex), or the UNIQ_KEY a producer returned.")],
    topic: Annotated[str | None, typer.Option(
        "--topic", help="Look for a UNIQ_KEY in this topic only.")] = None,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Show the message with an offsetMsgId (store host + commit-log position) or a UNIQ_KEY
    (the id ``outbox.send`` returns; the first stored record that carries it). With --broker:
    a UNIQ_KEY, with --topic."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:
        with remote_broker(broker_url, access_key, secret_key) as remote:
            view, copies, reason = find_remotely(remote, msg_id, topic)
    else:
        with open_store(options) as message_store:
            view, copies, reason = find_by_id(message_store, msg_id, topic)
    show_message(view, options, title=f"msg id {msg_id}", reason=reason)
    if copies:
        print_note(f"{len(copies)} more record(s) carry UNIQ_KEY {msg_id}: "
                   + ", ".join(f"{copy.topic} offset {copy.queue_offset}" for copy in copies))


@query_app.command("key")
@reports_errors
def query_key_command(
    topic: TopicArg,
    key: Annotated[str, typer.Argument(help="Message key (KEYS).")],
    max_count: Annotated[int, typer.Option("--max", min=1, help="At most N messages.")] = 64,
    begin_ms: Annotated[int, typer.Option(
        "--begin", metavar="MS", min=0,
        help="Stored at or after this epoch ms (the index keeps whole seconds).")] = 0,
    end_ms: Annotated[int | None, typer.Option(
        "--end", metavar="MS", min=0,
        help="Stored at or before this epoch ms (the index keeps whole seconds).")] = None,
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """List messages of a topic that carry a key."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:
        with remote_broker(broker_url, access_key, secret_key) as remote:
            views = AdminCalls(remote.context).query_by_key(topic, key, max_count, begin_ms,
                                                            end_ms)
    else:
        with open_store(options) as message_store:
            views = message_store.query_by_key(topic, key, max_count=max_count,
                                               begin_ms=begin_ms, end_ms=end_ms)
    show_messages(views, options, title=f"{topic} key {key}")


@query_app.command("unique-key")
@reports_errors
def query_unique_key_command(
    topic: TopicArg,
    unique_key: Annotated[str, typer.Argument(metavar="UNIQUE_KEY", help="UNIQ_KEY (msgId).")],
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """List messages of a topic with a client-side unique key (UNIQ_KEY)."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:
        with remote_broker(broker_url, access_key, secret_key) as remote:
            views = remote.find_by_unique_key(topic, unique_key)
    else:
        with open_store(options) as message_store:
            views = message_store.query_by_unique_key(topic, unique_key)
    show_messages(views, options, title=f"{topic} unique key {unique_key}")


@query_app.command("offset")
@reports_errors
def query_offset_command(
    topic: TopicArg, queue_id: QueueIdArg,
    offset: Annotated[int, typer.Argument(min=0, help="Queue offset.")],
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Show the message at an offset of one queue."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:
        with remote_broker(broker_url, access_key, secret_key) as remote:
            status, view, queue_range = message_at(remote.pull, topic, queue_id, offset)
    else:
        with open_store(options) as message_store:
            status, view, queue_range = message_at(message_store.get_message, topic, queue_id,
                                                   offset)
    title = f"{topic} queue {queue_id} offset {offset}"
    if json_output:
        print_json({"topic": topic, "queue_id": queue_id, "offset": offset,
                    "status": status.value, **queue_range,
                    "message": None if view is None else message_document(view)})
    elif view is not None:
        out_console().print(message_detail_table(view, title=title))
    if view is None:
        print_note(f"no message: {title}: {status.value} (queue offsets "
                   f"{queue_range['min_offset']}..{queue_range['max_offset']})")
        raise typer.Exit(EXIT_NOT_FOUND)


@query_app.command("time")
@reports_errors
def query_time_command(
    topic: TopicArg, queue_id: QueueIdArg,
    timestamp_ms: Annotated[int, typer.Argument(metavar="TIMESTAMP_MS", help="Epoch ms.")],
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None, json_output: JsonOption = False,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
) -> None:
    """Find the queue offset for a store time, and show the message there if any."""
    options = StoreOptions(store, broker_conf, segment_size, json_output)
    if broker_url is not None:  # SEARCH_OFFSET_BY_TIMESTAMP for a group that never commits
        with remote_broker(broker_url, access_key, secret_key) as remote:
            offset = remote.start_offset(CLI_CONSUMER_GROUP, topic, queue_id,
                                         ConsumeFrom.TIMESTAMP, timestamp_ms)
            status, view, queue_range = message_at(remote.pull, topic, queue_id, offset)
    else:
        with open_store(options) as message_store:
            offset = message_store.offset_by_time(topic, queue_id, timestamp_ms)
            status, view, queue_range = message_at(message_store.get_message, topic, queue_id,
                                                   offset)
    if json_output:
        print_json({"topic": topic, "queue_id": queue_id, "timestamp_ms": timestamp_ms,
                    "offset": offset, "status": status.value, **queue_range,
                    "message": None if view is None else message_document(view)})
        return
    console = out_console()
    console.print(f"offset {offset} (queue offsets {queue_range['min_offset']}.."
                  f"{queue_range['max_offset']})", highlight=False)
    if view is not None:
        console.print(message_detail_table(view, title=f"{topic} queue {queue_id} "
                                                       f"offset {offset}"))
