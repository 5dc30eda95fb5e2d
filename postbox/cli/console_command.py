"""``postbox console``: serve the operator's web console (``postbox.console``).

The command only gathers its options; the console package (and with it the web stack:
Starlette, Jinja2, uvicorn — the ``web`` extra) is loaded when the command runs, so the rest of
the command line works without it, and the console stays an edge nothing imports.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated, Any

import typer

from postbox.framework import environment

from .common import BrokerConfOption, CliError, SegmentSizeOption, StoreDirOption, reports_errors
from .remote import AccessKeyOption, BrokerUrlOption, SecretKeyOption, namesrv_addresses

WRITE_TOKEN_ENV_VAR = environment.CONSOLE_WRITE_TOKEN.name


@reports_errors
def console_command(
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT",
        help="Where to serve; beyond loopback only with a write token.")] = "127.0.0.1:8088",
    store: StoreDirOption = None, broker_conf: BrokerConfOption = None,
    segment_size: SegmentSizeOption = None,
    broker_url: BrokerUrlOption = None, access_key: AccessKeyOption = None,
    secret_key: SecretKeyOption = None,
    database_url: Annotated[str | None, typer.Option(
        "--database-url", "--db", metavar="URL", show_default=False,
        help="The outbox database (SQLAlchemy URL).")] = None,
    redis_url: Annotated[str | None, typer.Option(
        "--redis-url", "--redis", metavar="URL", show_default=False,
        help="The Redis of the idempotent handlers.")] = None,
    reports: Annotated[Path | None, typer.Option(
        "--reports", metavar="DIR", file_okay=False, show_default=False,
        help="Reconciliation output folder (runs: folders with a summary.json).")] = None,
    write_token: Annotated[str | None, typer.Option(
        "--write-token", metavar="TOKEN", envvar=WRITE_TOKEN_ENV_VAR, show_default=False,
        help="Unlocks the write actions (requeue, re-arm, void, offset reset, topic "
             "creation) for whoever signs in with it; read-only without.")] = None,
    refresh_s: Annotated[float, typer.Option(
        "--refresh", metavar="SECONDS", min=0.5, help="How often pages refresh themselves.")]
    = 5.0,
) -> None:
    """Serve the operator's web console over the sources given (one is enough)."""
    try:
        console = importlib.import_module("postbox.console")
    except ImportError as error:
        raise CliError(f"the console needs the web extra: pip install 'postbox[web]' "
                       f"({error})") from error
    if broker_url is not None:
        namesrv_addresses(broker_url)  # a malformed URL is an error now, not on every page
    try:
        host, port = console.parse_listen(listen)
        settings = console.ConsoleSettings(
            host=host, port=port, store_dir=store, broker_conf=broker_conf,
            segment_size_bytes=segment_size, broker_url=broker_url, access_key=access_key,
            secret_key=secret_key,
            database_url=database_url,
            redis_url=redis_url, reports_dir=reports, write_token=write_token or None,
            refresh_s=refresh_s)
        console.check_settings(settings)
    except console.ConsoleConfigError as error:
        raise CliError(str(error)) from error
    typer.echo(f"postbox console on http://{listen} "
               f"({', '.join(settings.sources())}; "
               f"{'write token set' if settings.writable else 'read-only'})", err=True)
    console.serve(settings)


ConsoleListenOption = Annotated[str | None, typer.Option(
    "--console", metavar="HOST:PORT", show_default=False,
    help="Also serve the web console over this broker's store (loopback unless a write token "
         "is set; port 0: any free port, printed).")]
ConsoleTokenOption = Annotated[str | None, typer.Option(
    "--console-write-token", metavar="TOKEN", envvar=WRITE_TOKEN_ENV_VAR, show_default=False,
    help="The console's write token (read-only without).")]


def start_console_beside(listen: str, broker: Any, store_dir: Path,
                         write_token: str | None) -> Any:
    """The web console over a running broker's store, served from a thread of its process
    (``postbox broker start --console``); returns the started ``ConsoleThread`` (``stop()``
    it) and prints where it listens."""
    try:
        console = importlib.import_module("postbox.console")
    except ImportError as error:
        raise CliError(f"--console needs the web extra: pip install 'postbox[web]' "
                       f"({error})") from error
    try:
        host, port = console.parse_listen(listen)
        settings = console.ConsoleSettings(host=host, port=port, store_dir=store_dir,
                                           write_token=write_token or None)
        served = console.ConsoleThread(settings, broker)
        address = served.start()
    except console.ConsoleConfigError as error:
        raise CliError(str(error)) from error
    typer.echo(f"console listening on {address}")
    return served
