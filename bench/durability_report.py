"""Rendering of the durability benchmark's report (``bench.durability_bench``): rich tables.

Pure formatting over the plain-data report; the targets live here because they are only ever
printed next to the figures, never asserted.
"""

from __future__ import annotations

import sys

from bench.report import NOTE, machine_line
from bench.report import TARGETS as CORE_TARGETS

TARGETS = {
    "sync_ratio_vs_bare_mmap": 0.70, "sync_target_threads": 8, "recovery_seconds_per_gib": 10.0,
    "async_put_msgs_per_s_100b": CORE_TARGETS["put_msgs_per_s_100b"],
}
MIB = 1 << 20
ROW_LABELS = {
    "postbox_sync": "Postbox put_message SYNC",
    "bare_mmap": "bare mmap+fdatasync (*)",
    "bare_pwrite": "bare pwrite+fdatasync",
    "persist_queue": "persist-queue SQLiteQueue",
}
CAPTION = (
    "Each thread row: the repetition with the median msgs/s. Latency per put (perf_counter_ns). "
    "timeouts = FLUSH_DISK_TIMEOUT results. dev flushes = flush requests the block device "
    "completed during the row (all processes). puts/sync = puts per commit-log flush (store: "
    "stats()['flush']['flush_count']; bare: its fdatasync calls). CPU us/put = the bench "
    "process's user + system CPU time during the row (every thread) per put: under the GIL the "
    "user part bounds msgs/s. Postbox / this = Postbox SYNC "
    "msgs/s divided by the row's msgs/s, same thread count. (*) the like-for-like baseline: "
    "the store also writes through an mmap and flushes with fdatasync.")


def met(ok: bool) -> str:
    """Rich markup for a target met or missed."""
    return "[green]met[/green]" if ok else "[red]missed[/red]"


def ratio_cell(row: dict, variant: str) -> str:
    """The Postbox / this ratio for one row of a thread group."""
    key = {"bare_mmap": "ratio_vs_bare_mmap", "bare_pwrite": "ratio_vs_bare_pwrite",
           "persist_queue": "ratio_vs_persist_queue"}.get(variant)
    return f"{row[key]:.2f}x" if key else ""


def status_cell(row: dict, variant: str) -> str:
    """Target verdict (bare mmap row at the target thread count) or the not-flushing flag."""
    if variant == "postbox_sync" and row["not_flushing"]:
        return "[red]not flushing?[/red]"
    if variant == "bare_mmap" and row["threads"] == TARGETS["sync_target_threads"]:
        target = TARGETS["sync_ratio_vs_bare_mmap"]
        return f">= {target:.2f}x: {met(row['ratio_vs_bare_mmap'] >= target)}"
    return ""


def cpu_cell(figure: dict) -> str:
    """User + system CPU microseconds per put (blank for reports without them)."""
    if "cpu_user_us_per_put" not in figure:
        return ""
    return f"{figure['cpu_user_us_per_put']:.0f} + {figure['cpu_system_us_per_put']:.0f}"


def thread_table(report: dict):
    """SYNC puts, bare harness and persist-queue for every thread count."""
    from rich.table import Table

    table = Table(title=f"Durable puts, {report['body_bytes']}-byte bodies ("
                  f"{report['record_bytes']}-byte records)", title_justify="left",
                  caption=CAPTION, caption_justify="left")
    for column in ("threads", "put path", "n", "msgs/s", "p50 us", "p99 us", "timeouts",
                   "dev flushes", "puts/sync", "CPU us/put", "Postbox / this", "target"):
        table.add_column(column, justify="left" if column == "put path" else "right")
    for row in report["threads"]:
        for variant, label in ROW_LABELS.items():
            figure = row[variant]
            flushes = figure["device_flushes"]
            group = f"{figure['count'] / figure['syncs']:.1f}" if figure.get("syncs") else ""
            table.add_row(str(row["threads"]), label, f"{figure['count']:,}",
                          f"{figure['per_s']:,.0f}", f"{figure['p50_us']:,.0f}",
                          f"{figure['p99_us']:,.0f}", f"{figure['unconfirmed']:,}",
                          "?" if flushes is None else f"{flushes:,}", group, cpu_cell(figure),
                          ratio_cell(row, variant), status_cell(row, variant))
        table.add_section()
    return table


def sync_target_line(report: dict) -> str:
    """The SYNC target sentence at the target thread count, or why it cannot be given."""
    threads, target = TARGETS["sync_target_threads"], TARGETS["sync_ratio_vs_bare_mmap"]
    row = next((r for r in report["threads"] if r["threads"] == threads), None)
    if row is None:
        return f"[bold]SYNC target[/bold]: not measured ({threads} threads not in --threads)"
    line = (f"[bold]Target, SYNC with {threads} threads >= {target:.0%} of the bare harness "
            f"(mmap + fdatasync):[/bold] {row['postbox_sync']['per_s']:,.0f} msgs/s = "
            f"{row['ratio_vs_bare_mmap']:.0%} of {row['bare_mmap']['per_s']:,.0f} "
            f"{met(row['ratio_vs_bare_mmap'] >= target)}; {row['ratio_vs_bare_pwrite']:.0%} of "
            f"bare pwrite + fdatasync ({row['bare_pwrite']['per_s']:,.0f}).")
    postbox, bare = row["postbox_sync"], row["bare_mmap"]
    if "cpu_user_us_per_put" in postbox and "cpu_user_us_per_put" in bare:
        line += (f" User CPU per put (GIL-bound): Postbox {postbox['cpu_user_us_per_put']:.0f} "
                 f"us, bare {bare['cpu_user_us_per_put']:.0f} us.")
    doubts = [f"{r['threads']} thr: {r['not_flushing']}" for r in report["threads"]
              if r["not_flushing"]]
    if doubts:
        line += (" [red]SYNC puts do not look flushed (" + "; ".join(doubts) + "), so these "
                 "SYNC figures and ratios are not valid.[/red]")
    return line


def async_line(report: dict) -> str:
    """The ASYNC put sentence (bench.store_bench's core measurement)."""
    figure, target = report["async"], TARGETS["async_put_msgs_per_s_100b"]
    return (f"[bold]ASYNC put_message, 1 thread, {report['body_bytes']} B[/bold] "
            f"(bench.store_bench's measurement: {figure['count']:,} puts, clock until the last "
            f"one is readable, {figure['segment_mib']} MiB segments): {figure['per_s']:,.0f} "
            f"msgs/s (calls only {figure['calls_per_s']:,.0f}); target >= {target:,}: "
            f"{met(figure['per_s'] >= target)}")


def recovery_line(recovery: dict) -> str:
    """The abnormal-recovery sentence."""
    written, target = recovery["written"], TARGETS["recovery_seconds_per_gib"]
    redone = recovery["redispatched_bytes"]
    redone_text = ("not reported" if redone is None
                   else f"{redone / MIB:,.0f} MiB ({redone / written['log_bytes']:.0%} of the log)")
    return (f"[bold]Abnormal recovery after kill -9[/bold]: {written['log_bytes'] / MIB:,.0f} MiB "
            f"log ({written['messages']:,} messages of {recovery['body_bytes']} B with a key, "
            f"{recovery['segment_mib']} MiB segments, ASYNC; the child wrote it at "
            f"{written['log_bytes'] / MIB / written['write_seconds']:,.0f} MiB/s). "
            f"open {recovery['open_seconds']:.2f} s, open + wait_dispatched "
            f"{recovery['seconds']:.2f} s = {recovery['seconds_per_gib']:.2f} s/GiB; target <= "
            f"{target:g} s/GiB: {met(recovery['seconds_per_gib'] <= target)}. Re-dispatched: "
            f"{redone_text}. Warm page cache (process crash, os.sync() before the clock).")


def render(report: dict) -> None:
    """Print the report: machine facts, the thread table, then the ASYNC and recovery lines."""
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    m, s = report["machine"], report["settings"]
    console.print(machine_line("Postbox durability benchmark", m))
    console.print(f"temp dirs under {m['tmp_dir']} ({m['tmp_filesystem']}); threads="
                  f"{','.join(map(str, s['thread_list']))} count/row={s['count']:,} "
                  f"reps={s['reps']} SYNC segments={s['segment_mib']} MiB seed={s['seed']}"
                  f"{' (--quick)' if s['quick'] else ''}")
    console.print(f"[bold]Note:[/bold] {NOTE}")
    console.print(thread_table(report))
    console.print(sync_target_line(report))
    console.print(async_line(report))
    if report["recovery"]:
        console.print(recovery_line(report["recovery"]))
