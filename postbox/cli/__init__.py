"""The ``postbox`` command line: a typer app with ``store``, ``query``, ``consumer``, ``dlq``,
``transactions``, ``outbox``, ``db`` and ``bench`` sub-apps, and the ``demo``, ``reconcile`` and
``console`` commands.

This package is the edge of the system: it may import any project package and nothing imports
it. ``main()`` is the console-script entry point (``postbox = "postbox.cli:main"``). Command
modules register themselves on their sub-app when imported; this module only assembles them.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from postbox.framework import LogFormat, environment

from .bench_commands import bench_app
from .broker_command import broker_app
from .common import err_console, logging_to, structured_logging
from .console_command import console_command
from .consumer_commands import consumer_app
from .db_commands import db_app
from .demo import demo_command
from .dlq_commands import dlq_app
from .outbox_commands import outbox_app
from .query_commands import query_app
from .reconcile_command import reconcile_command
from .store_commands import store_app
from .store_repair_command import repair_command
from .store_tour import tour_command
from .transaction_commands import transactions_app

app = typer.Typer(
    name="postbox",
    help="Postbox: reliable messaging with an embedded RocketMQ-compatible message store.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
store_app.command("tour")(tour_command)
store_app.command("repair")(repair_command)
app.add_typer(store_app)
app.add_typer(query_app)
app.add_typer(consumer_app)
app.add_typer(dlq_app)
app.add_typer(transactions_app)
app.add_typer(outbox_app)
app.add_typer(db_app)
app.add_typer(bench_app)
app.add_typer(broker_app)
app.command("demo")(demo_command)
app.command("reconcile")(reconcile_command)
app.command("console")(console_command)


@app.callback()
def root(ctx: typer.Context, verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Log what the store does (to stderr).")] = False,
        log_format: Annotated[LogFormat, typer.Option(
            "--log-format", envvar=environment.LOG_FORMAT.name, case_sensitive=False,
            help="text: readable lines (with -v); json: one JSON object per line on stderr "
                 "(warnings, and with -v all info), with topic/group/queue/offset/msg_id of "
                 "the message being handled.")] = LogFormat.TEXT) -> None:
    """Postbox: reliable messaging with an embedded RocketMQ-compatible message store."""
    level = logging.INFO if verbose else logging.WARNING
    if log_format is LogFormat.JSON:  # for this command only: undone when it ends
        ctx.with_resource(structured_logging(log_format, level))
    elif verbose:
        ctx.with_resource(logging_to(err_console(), logging.INFO, "%(name)s %(message)s"))


def main() -> None:
    """Run the command line (console-script entry point)."""
    app(prog_name="postbox")


__all__ = ["app", "main"]
