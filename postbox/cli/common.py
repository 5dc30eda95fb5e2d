"""Shared pieces of the ``postbox`` commands: store options, opening the store, output, errors.

Every command that touches a store takes the same four options (``--store``, ``--broker-conf``,
``--segment-size``, ``--json``), declared once here as ``Annotated`` aliases and gathered into a
``StoreOptions`` value. This is the edge of the system, so it is the one place that reads the
``POSTBOX_STORE`` environment variable.

Inspection opens the store read-only (``MessageStore.open(..., read_only=True)``): no lock, no
recovery, no file written, so it works while a broker or an application is writing the store,
and shows the store as it was at that moment. Only a command that changes the store (``dlq
resend``) opens it writable (``writable=True``), which a running writer refuses (its lock); such
a command goes through the running broker instead (``--broker``).

Commands that need broker semantics (consumer offsets, dead letters) use ``open_broker``: the
store opened as above with a ``storage_engine.Broker`` over it for the length of the command.

Output rules: with ``--json`` a command prints exactly one JSON document to stdout and nothing
else; human output goes through rich. Errors (``StorageError``, ``CliError``, ``OSError``) become
one red ``error: …`` line on stderr and exit code 2, never a traceback; "nothing found" is exit
code 1. Consoles are created per call so they follow the current ``sys.stdout``/``sys.stderr``
(and ``COLUMNS``), which keeps test runners and pipes working; output to a file or pipe is laid
out ``PIPE_WIDTH_CHARS`` wide unless ``COLUMNS`` says otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from postbox.framework import environment
from postbox.framework.log_format import LogFormat, log_handler
from postbox.storage_engine import (
    Broker,
    MessageStore,
    NotAStoreError,
    StorageError,
    StoreConfig,
    StoreLockedError,
    infer_config,
    require_store,
)
from postbox.storage_engine.store.read_only import TailMark

DEFAULT_STORE_DIR = Path(environment.STORE.default or ".")
STORE_DIR_ENV_VAR = environment.STORE.name
DISPATCH_WAIT_MS = 10_000
"""Longest wait, after opening a store, for consume queues and the key index to catch up."""

PIPE_WIDTH_CHARS = 200
"""Line width for tables written to a file or pipe (no terminal to fit; COLUMNS wins)."""

EXIT_NOT_FOUND = 1
"""Exit code when a query found nothing, or a demo check failed."""
EXIT_ERROR = 2
"""Exit code for errors: bad arguments, storage errors, I/O errors."""

StoreDirOption = Annotated[Path | None, typer.Option(
    "--store", metavar="DIR", envvar=STORE_DIR_ENV_VAR, show_default=False, file_okay=False,
    help=f"Store root directory \\[default: ./{DEFAULT_STORE_DIR}].")]
BrokerConfOption = Annotated[Path | None, typer.Option(
    "--broker-conf", metavar="FILE", exists=True, dir_okay=False, readable=True,
    help="RocketMQ broker.conf to build the store configuration from "
         "(--store, when given, overrides its storePathRootDir).")]
SegmentSizeOption = Annotated[int | None, typer.Option(
    "--segment-size", metavar="BYTES",
    help="Commit-log segment size of the store (needed for stores written with small "
         "segments).")]
JsonOption = Annotated[bool, typer.Option(
    "--json", help="Machine output: print exactly one JSON document to stdout.")]


class CliError(Exception):
    """A problem the command line reports as one ``error:`` line (exit code 2)."""


@dataclasses.dataclass(frozen=True)
class StoreOptions:
    """The common store options of one command invocation."""

    store_dir: Path | None = None
    broker_conf: Path | None = None
    segment_size_bytes: int | None = None
    json_output: bool = False


def build_config(options: StoreOptions, default_dir: Path = DEFAULT_STORE_DIR) -> StoreConfig:
    """The ``StoreConfig`` the options describe (``--segment-size`` wins over broker.conf)."""
    if options.broker_conf is not None:
        overrides: dict[str, Any] = ({} if options.store_dir is None
                                     else {"root_dir": options.store_dir})
        try:
            config = StoreConfig.from_broker_conf(options.broker_conf, **overrides)
        except OSError as error:
            raise CliError(f"cannot read {options.broker_conf}: {error.strerror}") from error
    else:
        root = options.store_dir or default_dir
        config = infer_config(root) if root.is_dir() else StoreConfig(root_dir=root)
    if options.segment_size_bytes is not None:
        commit_log = dataclasses.replace(config.commit_log,
                                         segment_size_bytes=options.segment_size_bytes)
        config = config.replace(commit_log=commit_log)
    return config


def inspected_store(root_dir: Path) -> Path:
    """``root_dir`` if it holds a store; else a ``CliError`` ("not a store"), with nothing
    written: commands that inspect or use an existing store never create one."""
    try:
        return require_store(root_dir)
    except NotAStoreError as error:
        raise CliError(f"{error} (give --store DIR or set {STORE_DIR_ENV_VAR})") from error


@contextlib.contextmanager
def open_store(options: StoreOptions, *, writable: bool = False,
               tail_mark: TailMark | None = None) -> Iterator[MessageStore]:
    """Open an existing store for a command; closes it on the way out. A directory that is not
    a store is refused before anything is written (``inspected_store``).

    By default the store is opened read-only (safe beside a running writer, nothing written).
    ``writable`` opens it for writing, recovered and with its lock, and (once dispatch caught
    up, up to ``DISPATCH_WAIT_MS``) closes it cleanly; a store another process holds is then
    refused with a ``CliError`` that names ``--broker``. ``tail_mark``: an earlier read-only
    view's (``MessageStore.open``'s).
    """
    config = build_config(options)
    inspected_store(config.root_dir)
    if not writable:
        with MessageStore.open(config, read_only=True, tail_mark=tail_mark) as view:
            yield view
        return
    try:
        store = MessageStore.open(config)
    except StoreLockedError as error:
        raise CliError(f"{error}: a running broker or application holds it; change it through "
                       "the broker instead (--broker rocketmq://NAMESRV:9876)") from error
    with store:
        if not store.wait_dispatched(timeout_ms=DISPATCH_WAIT_MS):
            print_warning(f"dispatch did not catch up within {DISPATCH_WAIT_MS} ms; "
                          "queue and key queries may miss the newest messages")
        yield store


@contextlib.contextmanager
def open_broker(options: StoreOptions, *, writable: bool = False,
                tail_mark: TailMark | None = None) -> Iterator[Broker]:
    """Open the store (``open_store``) and put a ``Broker`` over it for the block.

    The broker's services do not run: an inspection never delivers due delayed messages behind
    the operator's back. Read-only, the broker is dropped without persisting anything (its
    config tables were only read); ``writable``, it is closed first (its tables persisted),
    then the store.
    """
    with open_store(options, writable=writable, tail_mark=tail_mark) as message_store:
        broker = Broker(message_store, start_services=False)
        if not writable:
            yield broker
            return
        try:
            yield broker
        finally:
            broker.close()


def out_console() -> Console:
    """A rich console on the current stdout; wide when stdout is a file or pipe."""
    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH_CHARS
    return console


@contextlib.contextmanager
def logging_to(console: Console, level: int, log_format: str,
               filters: Sequence[logging.Filter] = ()) -> Iterator[None]:
    """Route log records of ``level`` and above (that pass ``filters``) to ``console`` for the
    length of the block.

    The handler is added to the root logger and taken off again afterwards, with the root
    level restored: a command run in-process (a test runner, an embedding program) leaves the
    logging of the process it ran in as it found it.
    """
    handler = RichHandler(console=console, show_path=False)
    handler.setFormatter(logging.Formatter(log_format))
    for log_filter in filters:
        handler.addFilter(log_filter)
    with _root_handler(handler, level):
        yield


@contextlib.contextmanager
def structured_logging(log_format: LogFormat, level: int) -> Iterator[None]:
    """Write log records of ``level`` and above to stderr in ``log_format`` (JSON lines with
    the consumed message's fields, ``framework.log_format``) for the length of the block, as
    ``logging_to`` does."""
    with _root_handler(log_handler(log_format, sys.stderr), level):
        yield


@contextlib.contextmanager
def _root_handler(handler: logging.Handler, level: int) -> Iterator[None]:
    """``handler`` on the root logger at ``level`` for the block; then as it was found."""
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)


def err_console() -> Console:
    """A rich console on the current stderr."""
    return Console(stderr=True)


def print_json(document: Any) -> None:
    """Print one JSON document (and nothing else) to stdout."""
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


def print_error(message: str) -> None:
    """One red ``error: …`` line on stderr."""
    err_console().print(f"[bold red]error:[/] {escape(message)}", highlight=False,
                        soft_wrap=True)


def print_warning(message: str) -> None:
    """One yellow ``warning: …`` line on stderr."""
    err_console().print(f"[yellow]warning:[/] {escape(message)}", highlight=False,
                        soft_wrap=True)


def print_note(message: str) -> None:
    """A plain informational line on stderr (keeps stdout clean for ``--json``)."""
    err_console().print(escape(message), highlight=False, soft_wrap=True)


@contextlib.contextmanager
def step_progress(console: Console, *, label_width: int = 16, transient: bool = False
                  ) -> Iterator[Callable[[str, int, int], None]]:
    """Progress bars, one per named step, driven by the ``progress(step, done, total)``
    callback this yields (the callback shape of the demo and the reconciliation)."""
    columns = (TextColumn(f"{{task.description:<{label_width}}}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=transient) as progress:
        tasks: dict[str, Any] = {}

        def update(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=total)
            progress.update(tasks[step], completed=done, total=total)

        yield update


CommandT = TypeVar("CommandT", bound=Callable[..., Any])


def reports_errors(command: CommandT) -> CommandT:
    """Decorate a command so known errors print one ``error:`` line and exit with code 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (StorageError, CliError) as error:
            print_error(str(error) or type(error).__name__)
        except OSError as error:
            where = f": {error.filename}" if error.filename else ""
            print_error(f"{error.strerror or error}{where}")
        raise typer.Exit(EXIT_ERROR)

    return wrapper  # type: ignore[return-value]
