"""``postbox bench …``: run the benchmarks that live in the source tree's ``bench/`` package.

Arguments after the command name go to the benchmark's own parser unchanged (``--help``
included). ``bench`` is not part of the installed distribution, so when it cannot be imported
the source checkout this package was loaded from is tried before giving up with a clear error.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from .common import EXIT_ERROR, CliError, print_error, reports_errors

bench_app = typer.Typer(name="bench", help="Run benchmarks.", no_args_is_help=True)

PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True,
                "help_option_names": []}
"""Context settings that hand every argument, ``--help`` included, to the benchmark."""

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The checkout holding ``postbox/`` (and, in a source tree, ``bench/``)."""


def load_bench_main(module_name: str) -> Callable[[list[str] | None], int]:
    """``main`` of a ``bench`` module, importing from the source checkout if needed."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name not in ("bench", module_name):
            raise
        module_path = SOURCE_ROOT.joinpath(*module_name.split(".")).with_suffix(".py")
        if not module_path.is_file():
            raise CliError(f"{module_name} is not available: bench/ ships only in a source "
                           f"checkout (looked for {module_path})") from error
        sys.path.insert(0, str(SOURCE_ROOT))
        module = importlib.import_module(module_name)
    bench_main = getattr(module, "main", None)
    if not callable(bench_main):
        raise CliError(f"{module_name} has no main(argv) function")
    return bench_main


def _run_bench(module_name: str, ctx: typer.Context) -> None:
    try:
        bench_main = load_bench_main(module_name)
    except ImportError as error:
        print_error(f"cannot load {module_name}: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    raise typer.Exit(bench_main(list(ctx.args)) or 0)


@bench_app.command("store", context_settings=PASS_THROUGH)
@reports_errors
def bench_store_command(ctx: typer.Context) -> None:
    """Benchmark the message store (arguments go to bench/store_bench.py; try --help)."""
    _run_bench("bench.store_bench", ctx)


@bench_app.command("engines", context_settings=PASS_THROUGH)
@reports_errors
def bench_engines_command(ctx: typer.Context) -> None:
    """Store put and pull with the native engine vs pure Python (bench/engine_bench.py)."""
    _run_bench("bench.engine_bench", ctx)


@bench_app.command("durability", context_settings=PASS_THROUGH)
@reports_errors
def bench_durability_command(ctx: typer.Context) -> None:
    """SYNC flush, group commit and crash recovery (bench/durability_bench.py; try --help)."""
    _run_bench("bench.durability_bench", ctx)


@bench_app.command("consume", context_settings=PASS_THROUGH)
@reports_errors
def bench_consume_command(ctx: typer.Context) -> None:
    """Framework end-to-end throughput and delay accuracy (bench/consume_bench.py; try --help)."""
    _run_bench("bench.consume_bench", ctx)


@bench_app.command("remote", context_settings=PASS_THROUGH)
@reports_errors
def bench_remote_command(ctx: typer.Context) -> None:
    """The official RocketMQ 5 client against a broker process (bench/remote_bench.py)."""
    _run_bench("bench.remote_bench", ctx)


@bench_app.command("transport", context_settings=PASS_THROUGH)
@reports_errors
def bench_transport_command(ctx: typer.Context) -> None:
    """The framework over a remote transport vs embedded (bench/transport_bench.py)."""
    _run_bench("bench.transport_bench", ctx)


@bench_app.command("replication", context_settings=PASS_THROUGH)
@reports_errors
def bench_replication_command(ctx: typer.Context) -> None:
    """SYNC/ASYNC_MASTER put latency with a slave process (bench/replication_bench.py)."""
    _run_bench("bench.replication_bench", ctx)


@bench_app.command("console", context_settings=PASS_THROUGH)
@reports_errors
def bench_console_command(ctx: typer.Context) -> None:
    """The web console's page latencies and memory over a large store (bench/console_bench.py)."""
    _run_bench("bench.console_bench", ctx)


@bench_app.command("hostile", context_settings=PASS_THROUGH)
@reports_errors
def bench_hostile_command(ctx: typer.Context) -> None:
    """Attacks of hostile peers on a broker process, before/after (bench/hostile_peers_bench.py)."""
    _run_bench("bench.hostile_peers_bench", ctx)


@bench_app.command("outbox-groups", context_settings=PASS_THROUGH)
@reports_errors
def bench_outbox_groups_command(ctx: typer.Context) -> None:
    """Relay throughput with stubs in message groups vs without (bench/outbox_groups_bench.py)."""
    _run_bench("bench.outbox_groups_bench", ctx)


@bench_app.command("outbox-scale", context_settings=PASS_THROUGH)
@reports_errors
def bench_outbox_scale_command(ctx: typer.Context) -> None:
    """The outbox from 10 thousand to 10 million stubs (bench/outbox_scale_bench.py)."""
    _run_bench("bench.outbox_scale_bench", ctx)


@bench_app.command("transactions", context_settings=PASS_THROUGH)
@reports_errors
def bench_transactions_command(ctx: typer.Context) -> None:
    """Transactional vs normal sends, Postbox and Apache (bench/transaction_bench.py)."""
    _run_bench("bench.transaction_bench", ctx)


@bench_app.command("broker-load", context_settings=PASS_THROUGH)
@reports_errors
def bench_broker_load_command(ctx: typer.Context) -> None:
    """postbox broker vs Apache's under the official Java client's load
    (bench/broker_load_bench.py)."""
    _run_bench("bench.broker_load_bench", ctx)


@bench_app.command("timers", context_settings=PASS_THROUGH)
@reports_errors
def bench_timers_command(ctx: typer.Context) -> None:
    """Timer delivery lateness and timer recovery after kill -9 (bench/timer_bench.py)."""
    _run_bench("bench.timer_bench", ctx)


@bench_app.command("fifo", context_settings=PASS_THROUGH)
@reports_errors
def bench_fifo_command(ctx: typer.Context) -> None:
    """Message groups consumed in order vs no groups (bench/fifo_bench.py)."""
    _run_bench("bench.fifo_bench", ctx)
