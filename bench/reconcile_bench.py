"""Reconciliation benchmark: the Spark job against one SQL query, on generated data of known counts.

Run ``python -m bench.reconcile_bench --stubs 1000000 [--stubs 10000000] [--database-url URL]``.
For every size, in a fresh temp dir and fresh tables (``bench.reconcile_data``):

* **generation**: ``generate`` writes the store (one message per stub) and the tables; seconds.
* **Spark**: ``run_reconciliation`` on ``--master`` (``local[2]``) in a session started once
  before the first size (start-up reported apart); wall seconds, the seconds of each step
  (export, store scan, classify, report) and the peak RSS of the JVM and its Python workers
  (every descendant of this process, sampled every 0.2 s; the JVM's heap does not shrink, so a
  later size's peak includes what an earlier one left).
* **Python engine** (``--no-python`` skips it): ``run_python_reconciliation``, the same
  classification in this process; wall seconds and this process's peak RSS (``VmHWM``).
* **SQL**: ``read_store_facts`` (DLQ/retry topics through their consume queues, the offsets
  file), then ``sql_classify`` (facts loaded into temp tables, then one query); seconds of each.
  On PostgreSQL also the backend's peak ``RssAnon`` (plus parallel workers, sampled the same
  way: private memory, shared buffers excluded) and ``temp_bytes`` spilled (``pg_stat_database``
  delta, read once the backend has exited).

Both classifications must equal the generator's counts exactly, else ``[bench] FAILED`` and exit
2. On PostgreSQL everything lives in a dedicated schema (``reconcile_bench_<pid>``, reached
through ``search_path``) dropped at the end, so the ``public`` tables the tests use are never
touched; on SQLite the database is a file in the temp dir (or, given ``--database-url``, the
tables this run created are dropped). Temp dirs are removed even when a step fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import sqlalchemy as sa

from bench.peers import BenchError, run_and_print
from bench.reconcile_data import generate, read_store_facts, sql_classify
from bench.sampling import PeriodicSampler
from postbox.outbox.tables import metadata
from postbox.spark_reconcile.classes import ALL_CLASSES

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SAMPLE_INTERVAL_S = 0.2
PG_EXIT_WAIT_S = 5.0
MIB = 1 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; see the module docstring for what each phase measures."""
    p = argparse.ArgumentParser(prog="python -m bench.reconcile_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--stubs", type=int, action="append", help="stubs per dataset (repeatable; "
                   "default 1 000 000)")
    p.add_argument("--database-url", default=None, help="default: PostgreSQL at "
                   f"{DEFAULT_DATABASE_URL} when reachable, else SQLite in the temp dir")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--standalone-workers", type=int, default=0, metavar="N",
                   help="start a standalone cluster on this machine (a master and N workers "
                        "of one core, as the tests' fixture does) and run on it")
    p.add_argument("--worker-memory", default="6g", help="each standalone worker's memory")
    p.add_argument("--executor-memory", default="5g",
                   help="executor and driver memory on the standalone cluster")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark settings for the session (repeatable)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--segment-mib", type=int, default=64, help="commit-log segment size")
    p.add_argument("--grace-ms", type=int, default=30_000)
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    p.add_argument("--no-python", dest="python", action="store_false",
                   help="skip the Python engine (it holds every row in memory)")
    args = p.parse_args(argv)
    args.stubs = args.stubs or [1_000_000]
    if min(args.stubs) < 1000:
        p.error("--stubs must be at least 1000 (every class needs a few)")
    try:
        args.spark_settings = dict(item.split("=", 1) for item in args.spark_conf)
    except ValueError:
        p.error("--spark-conf takes KEY=VALUE")
    return args


def progress(args: argparse.Namespace, text: str) -> None:
    """A progress line on stderr (silent with ``--json`` so stdout stays one document)."""
    if not args.json:
        print(f"[bench] {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- memory sampling


def _status_kb(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status``; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def descendants(root_pid: int) -> list[int]:
    """Every live descendant of ``root_pid`` (psutil when installed, else ``/proc``)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        with contextlib.suppress(psutil.Error):
            return [child.pid for child in psutil.Process(root_pid).children(recursive=True)]
        return []
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root_pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def pg_backend_pids(backend_pid: int | None) -> list[int]:
    """The backend and the parallel workers serving it (same host only)."""
    if backend_pid is None:
        return []
    pids = [backend_pid]
    mark = f"parallel worker for PID {backend_pid}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if mark in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
    return pids


class PeakSampler(PeriodicSampler):
    """Sums one ``/proc/<pid>/status`` field over ``pids()`` every ``interval_s`` in a thread;
    ``peak_kb`` is the largest sum seen. Use as a context manager (the thread is joined)."""

    def __init__(self, pids: Callable[[], Iterable[int]], field: str = "VmRSS",
                 interval_s: float = SAMPLE_INTERVAL_S) -> None:
        super().__init__(interval_s, "peak-sampler")
        self.pids, self.field = pids, field
        self.peak_kb = 0

    def sample(self) -> int:
        total = sum(_status_kb(pid, self.field) for pid in self.pids())
        self.peak_kb = max(self.peak_kb, total)
        return total


# ---------------------------------------------------------------- databases


def postgres_reachable(url: str) -> bool:
    engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            return True
    except Exception:  # any driver or network failure means "not here"
        return False
    finally:
        engine.dispose()


@contextlib.contextmanager
def bench_database(args: argparse.Namespace, work_dir: Path) -> Iterator[str]:
    """A database URL with no outbox tables in it, cleaned up afterwards (see module doc)."""
    url = args.database_url
    if url is None:
        url = (DEFAULT_DATABASE_URL if postgres_reachable(DEFAULT_DATABASE_URL)
               else f"sqlite:///{work_dir / 'app.db'}")
    if sa.make_url(url).get_backend_name() == "postgresql":
        with postgres_schema(url, f"reconcile_bench_{os.getpid()}") as schema_url:
            yield schema_url
        return
    engine = sa.create_engine(url)
    try:
        before = set(sa.inspect(engine).get_table_names())
        if before & set(metadata.tables):
            raise BenchError(f"{sa.make_url(url).render_as_string(hide_password=True)} already "
                             f"has outbox tables ({sorted(before & set(metadata.tables))}): "
                             "give the benchmark an empty database")
        yield url
    finally:
        with engine.begin() as connection:  # only what this run created
            for table in reversed(metadata.sorted_tables):
                if table.name not in before:
                    table.drop(connection, checkfirst=True)
        engine.dispose()


@contextlib.contextmanager
def postgres_schema(url: str, schema: str) -> Iterator[str]:
    """A fresh schema, and ``url`` with it first on the ``search_path``; dropped on exit."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        schema_url = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield schema_url.render_as_string(hide_password=False)
    finally:
        with engine.begin() as connection:
            connection.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        engine.dispose()


def pg_temp_bytes(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.exec_driver_sql(
                "SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()"
            ).scalar() or 0)
    finally:
        engine.dispose()


def wait_backend_exit(url: str, pid: int) -> None:
    """Until the backend left ``pg_stat_activity`` (its statistics are flushed at exit)."""
    engine = sa.create_engine(url)
    deadline = time.monotonic() + PG_EXIT_WAIT_S
    try:
        with engine.connect() as connection:
            while time.monotonic() < deadline and connection.exec_driver_sql(
                    f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)}").scalar():
                connection.rollback()
                time.sleep(0.05)
    finally:
        engine.dispose()


# ---------------------------------------------------------------- one size


def step_clock() -> tuple[dict[str, float], Callable[[str, int, int], None]]:
    """Seconds per step, and the progress callback that fills them: the seconds since the
    previous report go to the step reporting progress now (to "other" when it only starts:
    the gaps between steps)."""
    steps: dict[str, float] = {}
    last = [time.perf_counter()]

    def step(name: str, done: int, total: int) -> None:
        now = time.perf_counter()
        key = "export" if name.startswith("export") else (name if done else "other")
        steps[key] = steps.get(key, 0.0) + now - last[0]
        last[0] = now

    return steps, step


def run_spark(spark, store: Path, url: str, out: Path, args: argparse.Namespace) -> dict:
    """Wall seconds, per-step seconds, counts and peak RSS of one reconciliation."""
    from postbox.spark_reconcile import ReconcileOptions
    from postbox.spark_reconcile.job import run_reconciliation

    steps, step = step_clock()
    sampler = PeakSampler(lambda: descendants(os.getpid()))
    baseline_kb = sampler.sample()
    with sampler:
        started = time.perf_counter()
        result = run_reconciliation(ReconcileOptions(store_dir=store, database_url=url,
                                                     out_dir=out, master=args.master,
                                                     grace_ms=args.grace_ms), step, spark=spark)
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "steps": steps, "peak_rss_mb": sampler.peak_kb / 1024,
            "rss_before_mb": baseline_kb / 1024,
            "counts": {str(kind): count for kind, count in result.summary.counts.items()},
            "complete": result.summary.complete}


def run_python(store: Path, url: str, out: Path, args: argparse.Namespace) -> dict:
    """Wall seconds, per-step seconds, counts and this process's peak RSS of the Python engine
    (no JVM)."""
    from postbox.spark_reconcile import ReconcileOptions
    from postbox.spark_reconcile.python_engine import run_python_reconciliation

    steps, step = step_clock()
    started = time.perf_counter()
    result = run_python_reconciliation(ReconcileOptions(store_dir=store, database_url=url,
                                                        out_dir=out, grace_ms=args.grace_ms),
                                       step)
    return {"seconds": time.perf_counter() - started, "steps": steps,
            "peak_rss_mb": _status_kb(os.getpid(), "VmHWM") / 1024,
            "counts": {str(kind): count for kind, count in result.summary.counts.items()}}


def run_sql(store: Path, url: str, args: argparse.Namespace) -> dict:
    """Seconds to read the store facts, load them and run the query; PostgreSQL memory."""
    postgres = sa.make_url(url).get_backend_name() == "postgresql"
    started = time.perf_counter()
    facts = read_store_facts(store)
    facts_s = time.perf_counter() - started
    temp_before = pg_temp_bytes(url) if postgres else 0
    timings: dict = {}
    sampler = PeakSampler(lambda: pg_backend_pids(timings.get("backend_pid")), "RssAnon")
    with sampler:
        started = time.perf_counter()
        counts, query_s = sql_classify(url, facts, grace_ms=args.grace_ms, timings=timings)
        seconds = time.perf_counter() - started
    figures = {"facts_s": facts_s, "load_s": timings["load_s"], "query_s": query_s,
               "seconds": facts_s + seconds, "counts": counts,
               "dead_letters": len(facts.dead_letters)}
    if postgres:
        wait_backend_exit(url, timings["backend_pid"])
        figures["backend_peak_rss_anon_mb"] = sampler.peak_kb / 1024
        figures["temp_mb"] = (pg_temp_bytes(url) - temp_before) / MIB
    return figures


def check(name: str, counts: dict[str, int], expected: dict[str, int]) -> None:
    wrong = {kind: (counts.get(kind, 0), expected[kind]) for kind in expected
             if counts.get(kind, 0) != expected[kind]}
    if wrong:
        raise BenchError(f"{name} classification differs from the generated counts "
                         "(found, expected): " + ", ".join(f"{kind} {found} != {want}"
                                                           for kind, (found, want)
                                                           in wrong.items()))


def generation_progress(args: argparse.Namespace, stubs: int) -> Callable[[int, int], None]:
    """A progress line every million stubs written."""
    def report(done: int, total: int) -> None:
        if done % 1_000_000 == 0 or done == total:
            progress(args, f"{stubs:,} stubs: {done:,} written")
    return report


def measure_size(spark, stubs: int, args: argparse.Namespace) -> dict:
    """Generate, reconcile with Spark and with SQL, check both; everything removed after."""
    work = Path(tempfile.mkdtemp(prefix="postbox-reconcile-bench-", dir=args.dir))
    try:
        with bench_database(args, work) as url:
            progress(args, f"{stubs:,} stubs: generating into {work}")
            started = time.perf_counter()
            expected = generate(
                work / "store", url, stubs, seed=args.seed, queues=args.queues,
                segment_size_bytes=args.segment_mib * MIB,
                progress=generation_progress(args, stubs))
            generation_s = time.perf_counter() - started
            store_mb = sum(f.stat().st_size for f in (work / "store").rglob("*")
                           if f.is_file()) / MIB
            progress(args, f"{stubs:,} stubs: generated in {generation_s:.1f} s; Spark")
            spark_figures = run_spark(spark, work / "store", url, work / "out", args)
            progress(args, f"{stubs:,} stubs: Spark {spark_figures['seconds']:.1f} s; SQL")
            sql_figures = run_sql(work / "store", url, args)
            python_figures = (run_python(work / "store", url, work / "out-python", args)
                              if args.python else None)
            check("Spark", spark_figures["counts"], expected)
            if python_figures:
                check("Python engine", python_figures["counts"], expected)
            check("SQL", sql_figures["counts"], expected)
            backend = sa.make_url(url).get_backend_name()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"stubs": stubs, "database": backend, "generation_s": generation_s,
            "store_mb": store_mb, "expected": expected, "spark": spark_figures,
            "sql": sql_figures, "python": python_figures,
            "ratio": spark_figures["seconds"] / sql_figures["seconds"]}


def run(args: argparse.Namespace) -> dict:
    """Every size; returns the report as plain data (on a standalone cluster of this
    machine's own when ``--standalone-workers`` asks for one)."""
    if not args.standalone_workers:
        return run_sizes(args)
    from tests.support.spark_cluster import standalone_cluster

    base = Path(tempfile.mkdtemp(prefix="postbox-reconcile-cluster-", dir=args.dir))
    try:
        with standalone_cluster(base, args.standalone_workers,
                                worker_memory=args.worker_memory) as cluster:
            args.master = cluster.master_url
            args.spark_settings = {"spark.pyspark.python": sys.executable,
                                   "spark.executor.memory": args.executor_memory,
                                   "spark.driver.memory": args.executor_memory,
                                   **args.spark_settings}
            report = run_sizes(args)
            report["cluster"] = {"workers": args.standalone_workers,
                                 "worker_memory": args.worker_memory}
            return report
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_sizes(args: argparse.Namespace) -> dict:
    """Every size on ``args.master``."""
    from postbox.spark_reconcile.session import spark_session

    started = time.perf_counter()
    spark = spark_session(args.master, conf=args.spark_settings)
    report = {"spark_start_s": time.perf_counter() - started, "master": args.master,
              "cpus": len(os.sched_getaffinity(0)), "sizes": []}
    try:
        for stubs in args.stubs:
            report["sizes"].append(measure_size(spark, stubs, args))
    finally:
        spark.stop()
    return report


# ---------------------------------------------------------------- report


def render(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]],
              caption: str | None = None) -> Table:
        made = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
        for column in columns:
            made.add_column(column, justify="right")
        for row in rows:
            made.add_row(*row)
        return made

    sizes = report["sizes"]
    console = Console(width=max(shutil.get_terminal_size().columns, 110))
    console.print(table(
        f"Reconciliation: Spark ({report['master']}, {report['cpus']} CPUs) vs one SQL query",
        ("stubs", "db", "generation s", "Spark s", "Spark peak RSS MB", "SQL s",
         "ratio Spark/SQL"),
        ([f"{size['stubs']:,}", size["database"], f"{size['generation_s']:.1f}",
          f"{size['spark']['seconds']:.1f}", f"{size['spark']['peak_rss_mb']:,.0f}",
          f"{size['sql']['seconds']:.2f}", f"{size['ratio']:.1f}x"] for size in sizes),
        "Spark s: run_reconciliation, session already started (start-up "
        f"{report['spark_start_s']:.1f} s); peak RSS: JVM + Python workers. SQL s: store "
        "facts + temp-table load + query."))
    console.print(table(
        "Python engine (no JVM)", ("stubs", "seconds", "peak RSS MB", "ratio Python/SQL"),
        ([f"{size['stubs']:,}", f"{size['python']['seconds']:.1f}",
          f"{size['python']['peak_rss_mb']:,.0f}",
          f"{size['python']['seconds'] / size['sql']['seconds']:.1f}x"]
         for size in sizes if size["python"])))
    console.print(table(
        "SQL details", ("stubs", "store facts s", "load s", "query s", "dead letters",
                        "PG backend peak RssAnon MB", "PG temp MB"),
        ([f"{size['stubs']:,}", f"{size['sql']['facts_s']:.2f}", f"{size['sql']['load_s']:.2f}",
          f"{size['sql']['query_s']:.2f}", f"{size['sql']['dead_letters']:,}",
          f"{size['sql'].get('backend_peak_rss_anon_mb', 0):,.0f}" if "temp_mb" in size["sql"]
          else "n/a", f"{size['sql']['temp_mb']:,.0f}" if "temp_mb" in size["sql"] else "n/a"]
         for size in sizes)))
    names = sorted({name for size in sizes for name in size["spark"]["steps"]})
    console.print(table(
        "Steps (s)", ("stubs", "engine", *names),
        ([f"{size['stubs']:,}", engine, *(f"{size[engine]['steps'].get(name, 0):.1f}"
                                          for name in names)]
         for size in sizes for engine in ("spark", "python") if size[engine])))
    for size in sizes:
        counts = ", ".join(f"{kind} {size['expected'][kind]:,}" for kind in ALL_CLASSES)
        console.print(f"{size['stubs']:,} stubs ({size['store_mb']:,.0f} MB store): both "
                      f"classifications equal the generated counts: {counts}")


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m bench.reconcile_bench``."""
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
