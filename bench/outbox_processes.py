"""The exactly-once pipeline with its consumers in other processes, over ``rocketmq://``.

Part of ``bench.outbox_bench`` (its docstring says what the one-process pipeline measures). Here
the same pipeline is split the way a deployment scales it: a ``postbox broker start`` process
(name server and broker over RocketMQ's remoting protocol, ASYNC flush), this process running
the producer side (``--producer-threads`` threads of order row + ``outbox.send`` transactions,
the relay publishing after commit over ``rocketmq://``), and ``--processes`` K consumer
processes (``python -m bench.outbox_processes --consume ...``), each an ``App`` with the same
``idempotent=True`` handler ``bill`` in one consumer group, so the broker balances the queues
between them. The clock runs, as in the one-process pipeline, from the first transaction until
every stub is ``confirmed``; then the ledger must hold exactly one row per message.

A consumer process prints ``ready`` once its app started and stops (exit 0) when its stdin
closes; its stderr goes to a file in the run's directory, shown when it fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert

from bench.outbox_baselines import TOPIC, count_rows, ledger_rows
from bench.peers import BenchError

READY = "ready"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
BROKER_CONF = "mappedFileSizeCommitLog=67108864\nflushDiskType=ASYNC_FLUSH\n"


def register_bill(app: Any, group: str) -> None:
    """The bench's idempotent handler: one ``bench_ledger`` row per message, in the
    middleware's session (the transaction that confirms the stub)."""

    @app.handler(topic=TOPIC, consumer_group=group, consume_from="first", idempotent=True)
    def bill(message: Any, session: Any) -> None:
        data = json.loads(message.body)
        session.execute(insert(ledger_rows).values(
            message_id=message.msg_id, order_no=data["order"], amount=data["amount"]))


@contextlib.contextmanager
def broker_process(root: Path) -> Iterator[str]:
    """A ``postbox broker start`` serving remoting; yields its name server's ``host:port``."""
    from tests.support.remoting_targets import PostboxRemotingServer

    server = PostboxRemotingServer(root / "broker", broker_conf=BROKER_CONF).start()
    try:
        yield server.namesrv
    finally:
        server.stop()


@contextlib.contextmanager
def consumer_processes(count: int, store_url: str, database_url: str, redis_url: str,
                       group: str, root: Path) -> Iterator[list[subprocess.Popen]]:
    """``count`` consumer processes, each ``ready``; stopped (stdin closed) on exit."""
    processes: list[subprocess.Popen] = []
    logs = []
    try:
        for index in range(count):
            log = root / f"consumer-{index}.stderr"
            logs.append(log)
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "bench.outbox_processes", "--consume", store_url,
                 database_url, redis_url, group],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"), text=True))
        for process, log in zip(processes, logs, strict=True):
            line = _read_line(process, READY_TIMEOUT_S)
            if line.strip() != READY:
                raise BenchError(f"a consumer process did not start ({line!r}):\n"
                                 + log.read_text()[-3000:])
        yield processes
    finally:
        for process in processes:
            with contextlib.suppress(OSError):
                process.stdin.close()
        for process, log in zip(processes, logs, strict=False):
            try:
                code = process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            if code != 0:
                raise BenchError(f"a consumer process exited with {code}:\n"
                                 + log.read_text()[-3000:])


def _read_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The next stdout line of ``process`` ("" if it ended or ``timeout_s`` passed)."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            return ""
    return process.stdout.readline()


def processes_pipeline(args: argparse.Namespace, target: Any, redis_url: str,
                       root: Path) -> dict:
    """One measurement of the pipeline with ``args.processes`` consumer processes."""
    from bench.outbox_baselines import cpu_window
    from bench.outbox_bench import confirmed_at_least, send_orders, stub_summary, wait_for
    from postbox.framework import App
    from postbox.outbox import Outbox, database_engine

    target.reset()
    group = f"bench-billing-{uuid.uuid4().hex[:8]}"
    run_dir = root / f"processes-{group}"
    run_dir.mkdir(parents=True)
    with broker_process(run_dir) as namesrv:
        store_url = f"rocketmq://{namesrv}"
        with consumer_processes(args.processes, store_url, target.url, redis_url, group,
                                run_dir):
            app = App(store_url=store_url, database_url=target.url, redis_url=redis_url)
            box = Outbox(app, engine=database_engine(app))
            poll = create_engine(target.url)
            context = {"app": app, "box": box, "poll": poll, "group": group}
            try:
                app.start()
                ids: dict[int, str] = {}
                warm, count = args.warmup, args.messages
                if warm:
                    send_orders(box, 0, warm, args.producer_threads, ids)
                    wait_for(confirmed_at_least(context, warm), args.timeout, "warm-up",
                             lambda: stub_summary(context))
                window = cpu_window()
                start, produced = send_orders(box, warm, count, args.producer_threads, ids)
                done = wait_for(confirmed_at_least(context, warm + count), args.timeout,
                                "pipeline over rocketmq://", lambda: stub_summary(context))
                cpu, machine_cpu = window()
                ledger = count_rows(poll, ledger_rows)
                if ledger != warm + count:
                    raise BenchError(f"{target.name}: ledger holds {ledger} rows after "
                                     f"{warm + count} messages (exactly-once broken)")
            finally:
                app.stop()
                poll.dispose()
    return {"seconds": done - start, "producer_s": produced - start, "cpu_s": cpu,
            "machine_cpu_s": machine_cpu, "processes": args.processes}


def consume_main(store_url: str, database_url: str, redis_url: str, group: str) -> int:
    """A consumer process: the ``bill`` handler until stdin closes."""
    from postbox.framework import App

    app = App(store_url=store_url, database_url=database_url, redis_url=redis_url)
    register_bill(app, group)
    app.start()
    try:
        print(READY, flush=True)
        sys.stdin.read()
    finally:
        app.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.outbox_processes --consume STORE_URL DATABASE_URL REDIS_URL GROUP``."""
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 5 or arguments[0] != "--consume":
        print(main.__doc__, file=sys.stderr)
        return 2
    return consume_main(*arguments[1:])


if __name__ == "__main__":
    sys.exit(main())
