"""The operator console's page latencies and memory over a large data set, in one run.

```
python -m bench.console_bench                 # scale 1: 1 M messages and stubs, 1 000 topics
python -m bench.console_bench --scale 0.01    # seconds
```

The data set (``bench.console_data``) is built once into ``--cache`` and reused. A real
``postbox console`` process is started over it; every page is fetched with httpx ``--warmup``
times, then ``--requests`` times, one at a time: p50/p95 per page. Baselines measured in the
same run: the same page's data call made directly in this process (the console's own function
over freshly opened sources, no HTTP, no template) and an unrouted URL of the same server (the
HTTP floor). Then ``--soak`` seconds of a few pages in turn, across the console's background
reopening of the store. The console's memory is its process's ``VmHWM`` and ``VmRSS``
(``/proc``), and the peak of each phase (the store's opening by the first page, the page table,
the soak) split into heap (``RssAnon``) and mapped files (``RssFile``), sampled every 20 ms.
Targets (printed, never asserted): every page p50 ≤ 300 ms, search by key ≤ 50 ms, RSS < 200 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bench.console_data import DataSet, load_or_build, topic_name, unique_key
from bench.console_process import ConsoleProcess, console_process
from bench.sampling import PeriodicSampler

PAGE_TARGET_MS = 300.0
KEY_TARGET_MS = 50.0
RSS_TARGET_MB = 200.0
SAMPLE_S = 0.02
SOAK_PAGES = ("overview", "topics", "search key", "message page", "dead letters G000")
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
    "postbox-console-bench"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="postbox bench console", description=__doc__.split(
        "\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of 1 M messages / 1 000 topics / 200 groups / 1 M stubs")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where the data set is built once and kept")
    parser.add_argument("--database-url", default=None,
                        help="outbox database (default: SQLite in the cache)")
    parser.add_argument("--rebuild", action="store_true", help="build the data set again")
    parser.add_argument("--requests", type=int, default=20, help="measured requests per page")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured requests per page")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the in-process library baseline")
    parser.add_argument("--console-python", default=sys.executable,
                        help="the interpreter that runs `postbox console` (another checkout's "
                             "venv measures its console over the same data)")
    parser.add_argument("--refresh", type=float, default=5.0,
                        help="the console's --refresh (the store view is reopened once older "
                             "than it, or ten times its opening's duration)")
    parser.add_argument("--soak", type=float, default=90.0,
                        help="seconds of fetching a few pages in turn after the page table, "
                             "across the console's background reopening of the store")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return parser.parse_args(argv)


def pages(data: DataSet) -> list[tuple[str, str]]:
    """(name, URL path) of every page measured."""
    per_queue = data.messages // (data.topics * 4)
    middle = data.messages // 2
    topic = topic_name(middle // (per_queue * 4))
    key_topic_index = middle // (per_queue * 4)
    span_ms = max((data.last_store_ms - data.first_store_ms) // 1000, 1)
    message = {"source": "store", "topic": topic, "queue": 1, "offset": per_queue // 2}
    return [
        ("overview", "/"),
        ("topics", "/topics"),
        ("groups", "/groups"),
        ("one group", "/groups?group=G001"),
        ("search id (UNIQ_KEY)", "/messages?" + urlencode({"by": "id", "q": unique_key(middle)})),
        ("search key", "/messages?" + urlencode({"by": "key", "topic": topic_name(
            key_topic_index), "q": f"order-{middle}"})),
        ("search unique key", "/messages?" + urlencode({"by": "unique", "topic": topic,
                                                         "q": unique_key(middle)})),
        ("search queue+offset", "/messages?" + urlencode({"by": "offset", "topic": topic,
                                                           "queue": 1, "offset": 3})),
        ("search time range", "/messages?" + urlencode({
            "by": "time", "topic": topic, "begin": data.first_store_ms,
            "end": data.first_store_ms + span_ms})),
        ("message page", "/message?" + urlencode(message)),
        ("dead letters", "/dlq"),
        ("dead letters G000", "/dlq?group=G000"),
        ("outbox", "/outbox"),
        ("outbox void", "/outbox?status=void"),
        ("reconciliation", "/reports"),
    ]


@contextlib.contextmanager
def console_over(data: DataSet, python: str, refresh_s: float) -> Iterator[ConsoleProcess]:
    """``postbox console`` over the data set (run outside any checkout: the interpreter's own
    ``postbox``)."""
    with console_process(["--store", str(data.store_dir), "--db", data.database_url,
                          "--reports", str(data.reports_dir), "--refresh", str(refresh_s)],
                         python=python, cwd=data.root) as console:
        yield console


class MemorySampler(PeriodicSampler):
    """Samples ``/proc/PID/status`` every ``SAMPLE_S`` in a thread: per phase, the largest
    ``VmRSS`` with its split into ``RssAnon`` (heap) and ``RssFile`` (mapped files) at that
    moment, and the largest of each on its own. ``VmHWM`` (the kernel's own peak) is read at the
    end; a peak shorter than a sample is in it but not split."""

    def __init__(self, pid: int) -> None:
        super().__init__(SAMPLE_S, "memory-sampler")
        self.pid = pid
        self.phase = "start"
        self.peaks: dict[str, dict[str, float]] = {}
        self._gone = False

    def sample(self) -> None:
        """Fold the process's memory now into the current phase's peaks (nothing once the
        process is gone)."""
        if self._gone:
            return
        try:
            figures = memory_mb(self.pid)
        except (OSError, ValueError):
            self._gone = True
            return
        peak = self.peaks.setdefault(self.phase, {"VmRSS": 0.0, "RssAnon_max": 0.0,
                                                  "RssFile_max": 0.0})
        if figures["VmRSS"] > peak["VmRSS"]:
            peak.update(VmRSS=figures["VmRSS"], RssAnon=figures["RssAnon"],
                        RssFile=figures["RssFile"])
        peak["RssAnon_max"] = max(peak["RssAnon_max"], figures["RssAnon"])
        peak["RssFile_max"] = max(peak["RssFile_max"], figures["RssFile"])


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def measure_http(client: Any, path: str, warmup: int, count: int,
                 expect: int = 200) -> dict[str, Any]:
    """p50/p95 of ``count`` GETs of ``path`` after ``warmup``; the status and body checked."""
    samples, size, problem = [], 0, None
    for number in range(warmup + count):
        started = time.perf_counter()
        response = client.get(path)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != expect:
            problem = f"HTTP {response.status_code}"
        elif 'class="error' in response.text:
            problem = "a source error on the page"
        size = len(response.content)
        if number >= warmup:
            samples.append(elapsed)
    return {**percentiles(samples), "bytes": size, "problem": problem}


def memory_mb(pid: int) -> dict[str, float]:
    """``VmHWM`` and ``VmRSS`` of ``pid`` in MB."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
            figures[name] = int(value.split()[0]) / 1024
    return figures


def library_calls(data: DataSet) -> dict[str, Callable[[], Any]]:
    """The data call behind some pages, made directly (the same functions, sources opened
    per call as the console does, no HTTP and no template)."""
    from postbox.console import pages_dlq, pages_messages, pages_outbox, pages_topics
    from postbox.console.settings import ConsoleSettings
    from postbox.console.sources import Sources

    sources = Sources(ConsoleSettings(store_dir=data.store_dir, database_url=data.database_url,
                                      reports_dir=data.reports_dir))
    named = dict(pages(data))

    def search(name: str) -> Callable[[], Any]:
        params = dict(__import__("urllib.parse").parse.parse_qsl(named[name].split("?")[1]))
        return lambda: sources.with_broker("store", lambda broker: pages_messages.search(
            broker, params["by"], params))

    return {
        "topics": lambda: sources.each_broker(lambda broker: pages_topics.page_of(
            pages_topics.topic_list(broker), 1, pages_topics.TOPICS_PER_PAGE)),
        "groups": lambda: sources.each_broker(
            lambda broker: pages_topics.group_page(broker, None, 1)),
        "one group": lambda: sources.each_broker(
            lambda broker: pages_topics.group_page(broker, "G001", 1)),
        "search id (UNIQ_KEY)": search("search id (UNIQ_KEY)"),
        "search key": search("search key"),
        "search unique key": search("search unique key"),
        "search queue+offset": search("search queue+offset"),
        "search time range": search("search time range"),
        "dead letters G000": lambda: sources.each_broker(
            lambda broker: pages_dlq.classes_of(broker, "G000")),
        "outbox": lambda: sources.with_database(
            lambda engine: pages_outbox.outbox_view(engine, None, None)),
    }


def measure_library(data: DataSet, count: int) -> dict[str, float]:
    """p50 (ms) of each library call, one warm-up first."""
    result = {}
    for name, call in library_calls(data).items():
        call()
        samples = []
        for _ in range(max(count // 2, 3)):
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000)
        result[name] = statistics.median(samples)
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build or load the data set, measure every page, the floor, the library and memory."""
    import httpx

    started = time.perf_counter()
    data = load_or_build(args.cache, args.scale, args.database_url, args.rebuild)
    print(f"data set ready in {time.perf_counter() - started:.1f} s "
          f"(build: {data.build_s})", file=sys.stderr)
    report: dict[str, Any] = {"scale": args.scale, "messages": data.messages,
                              "topics": data.topics, "groups": data.groups, "stubs": data.stubs,
                              "database": data.database_url.split(":")[0],
                              "build_s": data.build_s, "pages": {}}
    with console_over(data, args.console_python, args.refresh) as console, \
            MemorySampler(console.pid) as sampler, \
            httpx.Client(base_url=console.url, timeout=120) as client:
        report["memory_start_mb"] = memory_mb(console.pid)
        sampler.phase = "open"  # the first page opens the store
        report["open_ms"] = measure_http(client, "/", 0, 1)["max"]
        sampler.phase = "pages"
        report["floor"] = measure_http(client, "/not-a-page", args.warmup, args.requests,
                                       expect=404)
        for name, path in pages(data):
            print(f"  {name}", file=sys.stderr, flush=True)
            report["pages"][name] = {"path": path, **measure_http(client, path, args.warmup,
                                                                  args.requests)}
        sampler.phase = "soak"
        report["soak"] = soak(client, data, args.soak)
        report["memory_mb"] = memory_mb(console.pid)
    report["memory_peaks_mb"] = sampler.peaks
    report["library_p50_ms"] = {} if args.no_baseline else measure_library(data, args.requests)
    return report


def soak(client: Any, data: DataSet, seconds: float) -> dict[str, Any]:
    """``SOAK_PAGES`` fetched in turn for ``seconds``, long enough for the console to open the
    store again in the background (its view is replaced once older than the refresh interval,
    or ten times its opening's duration): p50/p95/max over every request."""
    named = dict(pages(data))
    samples: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in SOAK_PAGES:
            started = time.perf_counter()
            client.get(named[name])
            samples.append((time.perf_counter() - started) * 1000)
    return {**percentiles(samples), "requests": len(samples), "seconds": seconds} \
        if samples else {}


def verdict(name: str, row: dict[str, Any]) -> str:
    target = KEY_TARGET_MS if name == "search key" else PAGE_TARGET_MS
    if row.get("problem"):
        return f"WRONG: {row['problem']}"
    return "ok" if row["p50"] <= target else f"over {target:.0f} ms"


def print_table(report: dict[str, Any]) -> None:
    floor = report["floor"]["p50"]
    library = report["library_p50_ms"]
    print(f"console bench: scale {report['scale']:g} — {report['messages']:,} messages, "
          f"{report['topics']:,} topics, {report['groups']} groups, {report['stubs']:,} stubs "
          f"({report['database']})")
    print(f"{'page':<22}{'p50 ms':>9}{'p95 ms':>9}{'library':>9}{'x floor':>9}{'KiB':>7}  "
          "target")
    for name, row in report["pages"].items():
        direct = library.get(name)
        print(f"{name:<22}{row['p50']:>9.1f}{row['p95']:>9.1f}"
              f"{'' if direct is None else f'{direct:.1f}':>9}{row['p50'] / floor:>9.0f}"
              f"{row['bytes'] / 1024:>7.0f}  {verdict(name, row)}")
    print(f"{'HTTP floor (404)':<22}{floor:>9.1f}{report['floor']['p95']:>9.1f}")
    soaked = report["soak"]
    if soaked:
        print(f"{'soak (' + str(soaked['requests']) + ' req)':<22}{soaked['p50']:>9.1f}"
              f"{soaked['p95']:>9.1f}  max {soaked['max']:.0f} ms over {soaked['seconds']:.0f} s "
              f"of {', '.join(SOAK_PAGES)} (across background reopens)")
    print(f"first page (opens the store): {report['open_ms']:.0f} ms")
    print_memory(report)
    print("library = the page's data call made directly in this process (p50), no HTTP or "
          "template; x floor = page p50 / the same server's 404 p50")


def print_memory(report: dict[str, Any]) -> None:
    memory = report["memory_mb"]
    print(f"console RSS: VmHWM {memory['VmHWM']:.0f} MB, VmRSS {memory['VmRSS']:.0f} MB = "
          f"RssAnon {memory['RssAnon']:.0f} MB (heap) + RssFile {memory['RssFile']:.0f} MB "
          f"(mapped store files) at the end (VmRSS at start "
          f"{report['memory_start_mb']['VmRSS']:.0f} MB; target < {RSS_TARGET_MB:.0f} MB: "
          f"VmHWM {'ok' if memory['VmHWM'] < RSS_TARGET_MB else 'over'}, RssAnon "
          f"{'ok' if memory['RssAnon'] < RSS_TARGET_MB else 'over'})")
    for phase, peak in report["memory_peaks_mb"].items():
        print(f"  peak while {phase:<6} VmRSS {peak['VmRSS']:>5.0f} MB = RssAnon "
              f"{peak.get('RssAnon', 0):>4.0f} + RssFile {peak.get('RssFile', 0):>4.0f} "
              f"(largest alone: anon {peak['RssAnon_max']:.0f}, file "
              f"{peak['RssFile_max']:.0f}; sampled every {SAMPLE_S * 1000:.0f} ms)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    wrong = any(row.get("problem") for row in report["pages"].values())
    return 2 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
