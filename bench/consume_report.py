"""Rendering of the consume benchmark's report (``bench.consume_bench``): rich tables.

Pure formatting over the plain-data report; the target lives here because it is only ever
printed next to the figures, never asserted.
"""

from __future__ import annotations

import sys

from bench.report import NOTE, machine_line

TARGETS = {"end_to_end_msgs_per_s": 100_000}
RAW_LABELS = {
    "put_single": "raw put_message, per message (Message built in the clock)",
    "put_batch": "raw put_messages, batches of 32",
    "get": "raw get_message max_count=32, touching bodies",
    "put_batch_and_get": "raw put_messages + get_message, back to back (baseline)",
}
THROUGHPUT_CAPTION = (
    "e2e = end to end: first send (one producer thread) until the group's committed offsets cover "
    "all messages, consumer running throughout; sends/s = the producer's rate meanwhile. "
    "consume-only = app.start() until committed, on a pre-loaded topic. baseline = raw "
    "put_messages + get_message of the same messages, no framework, one thread. msgs/call = "
    "messages per handler call in the end-to-end run (largest call in brackets).")


def met(ok: bool) -> str:
    """Rich markup for a target met or missed."""
    return "[green]met[/green]" if ok else "[red]missed[/red]"


def throughput_table(report: dict):
    """End-to-end and consume-only rates per consumer variant."""
    from rich.table import Table

    part, count = report["throughput"], report["settings"]["messages"]
    table = Table(title=f"Framework throughput, {count:,} x {report['body_bytes']}-byte "
                  "bodies, one process", title_justify="left", caption=THROUGHPUT_CAPTION,
                  caption_justify="left")
    for column in ("consumer", "e2e msgs/s", "sends/s", "e2e / baseline",
                   "consume-only msgs/s", "/ raw get", "handled", "msgs/call (max)",
                   "target (e2e)"):
        table.add_column(column, justify="left" if column == "consumer" else "right")
    target = TARGETS["end_to_end_msgs_per_s"]
    for figures in part["variants"].values():
        e2e, consumed = figures["end_to_end"], figures["consume_only"]
        table.add_row(figures["label"], f"{e2e['per_s']:,.0f}", f"{e2e['sends_per_s']:,.0f}",
                      f"{figures['e2e_vs_raw']:.2f}x", f"{consumed['per_s']:,.0f}",
                      f"{figures['consume_vs_raw_get']:.2f}x", f"{e2e['consumed']:,}",
                      f"{e2e['consumed'] / e2e['handler_calls']:.1f} ({e2e['largest_batch']})",
                      f">= {target:,}: {met(figures['target_met'])}")
    return table


def baseline_table(report: dict):
    """Produce-only and the raw store figures of the same run."""
    from rich.table import Table

    part = report["throughput"]
    table = Table(title="Producer alone and raw store baseline (same run)", title_justify="left")
    for column in ("operation", "n", "seconds", "msgs/s", "ratio"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    produced = part["produce_only"]
    table.add_row("producer.send, no consumer, until dispatched", f"{produced['count']:,}",
                  f"{produced['seconds']:.2f}", f"{produced['per_s']:,.0f}",
                  f"{part['produce_vs_raw_put_single']:.2f}x raw put_message")
    for name, label in RAW_LABELS.items():
        figure = part["raw"][name]
        table.add_row(label, f"{figure['count']:,}", f"{figure['seconds']:.2f}",
                      f"{figure['per_s']:,.0f}", "")
    return table


def target_line(report: dict) -> str:
    """One sentence: the best end-to-end rate against the target, and the baseline."""
    part, target = report["throughput"], TARGETS["end_to_end_msgs_per_s"]
    name, best = max(part["variants"].items(), key=lambda item: item[1]["end_to_end"]["per_s"])
    baseline = part["raw"]["put_batch_and_get"]["per_s"]
    return (f"[bold]Target >= {target:,} msgs/s end to end:[/bold] "
            f"{met(best['target_met'])} — best {best['end_to_end']['per_s']:,.0f} msgs/s "
            f"({name}) = {best['end_to_end']['per_s'] / target:.0%} of the target; the raw "
            f"store baseline (no framework) does {baseline:,.0f} msgs/s"
            f"{'' if baseline >= target else ', itself below the target'}.")


def delay_table(delay: dict):
    """Lateness p50/p99/max: the delay service's own samples and end to end per level."""
    from rich.table import Table

    table = Table(title=f"Delay-level lateness, {delay['delayed_count']:,} delayed + "
                  f"{delay['load_count']:,} normal messages (ms, wall clock)",
                  title_justify="left", caption=delay_caption(delay), caption_justify="left")
    for column in ("measured", "n", "p50 ms", "p99 ms", "max ms", "min ms"):
        table.add_column(column, justify="left" if column == "measured" else "right")
    rows = [("delay service: run time - deliver time", delay["service"]),
            ("end to end, all levels", delay["end_to_end"])]
    rows += [(f"end to end, level {level} ({delay['levels_ms'][int(level) - 1]} ms)", spread)
             for level, spread in delay["end_to_end_by_level"].items()]
    rows.append(("normal topic: send -> handler latency", delay["load_latency"]))
    for label, spread in rows:
        if not spread["count"]:
            table.add_row(label, "0", "", "", "", "")
            continue
        table.add_row(label, f"{spread['count']:,}", f"{spread['p50_ms']:,.1f}",
                      f"{spread['p99_ms']:,.1f}", f"{spread['max_ms']:,.1f}",
                      f"{spread['min_ms']:,.1f}")
    return table


def delay_caption(delay: dict) -> str:
    """How the delay run was driven, and the early-delivery check."""
    early = delay["early_count"]
    return (f"end to end = handler receive - (send + level delay). Sends paced at "
            f"{delay['target_rate_per_s']:,} msgs/s, achieved {delay['achieved_rate_per_s']:,.0f}"
            f" over {delay['send_seconds']:.1f} s; all received {delay['drain_seconds']:.2f} s "
            f"after the last send. Delivered by the service: {delay['delivered_count']:,} "
            f"(skipped {delay['skipped_count']}). Early (< -1 ms): "
            + (f"{early}" if not early else f"[red]{early}[/red]"))


def profile_table(profile: dict, rows_key: str, order: str):
    """Top functions of one profiled end-to-end run, all threads merged, in one order."""
    from rich.table import Table

    e2e = profile["end_to_end"]
    table = Table(title=f"cProfile, one end-to-end concurrent run ({e2e['per_s']:,.0f} msgs/s "
                  f"under the profiler), CPU time of all threads merged, by {order}",
                  title_justify="left", caption="per-thread CPU time (time.thread_time), "
                  "summed over threads: time spent blocked (locks, GIL, queues) is not counted",
                  caption_justify="left")
    for column in ("function", "calls", "own CPU s", "cumulative CPU s"):
        table.add_column(column, justify="left" if column == "function" else "right")
    for row in profile[rows_key]:
        table.add_row(row["function"], f"{row['calls']:,}", f"{row['own_s']:.2f}",
                      f"{row['cumulative_s']:.2f}")
    return table


def render(report: dict) -> None:
    """Print the report as rich tables, machine facts first."""
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    m, s = report["machine"], report["settings"]
    console.print(machine_line("Postbox consume benchmark", m))
    console.print(f"temp dirs under {m['tmp_dir']} ({m['tmp_filesystem']}); messages="
                  f"{s['messages']:,} delayed={s['delayed']:,} load_ratio={s['load_ratio']} "
                  f"segment_mib={s['segment_mib']} seed={s['seed']}; ASYNC flush")
    console.print(f"[bold]Note:[/bold] {NOTE}")
    if report["throughput"]:
        console.print(throughput_table(report))
        console.print(baseline_table(report))
        console.print(target_line(report))
    if report["delay"]:
        console.print(delay_table(report["delay"]))
    if report["profile"]:
        console.print(profile_table(report["profile"], "top", "cumulative time"))
        console.print(profile_table(report["profile"], "top_own", "own time"))
