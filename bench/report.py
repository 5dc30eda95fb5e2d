"""Rendering of the store benchmark's report: rich tables, headline and memory lines.

Pure formatting over the plain-data report built by ``bench.store_bench.run``; the targets live
here because they are only ever printed next to the figures, never asserted.
"""

from __future__ import annotations

import sys

TARGETS = {
    "put_msgs_per_s_100b": 250_000, "get_msgs_per_s": 500_000, "lookups_per_s": 150_000,
    "put_ratio_vs_fastest_non_fsync_peer": 10.0, "heap_mb_5m": 200,
}
NOTE = ("All figures, Postbox and peers, are measured in this same run on this machine; ratios "
        "are between figures of this run, never against numbers from elsewhere.")


LABELS = {
    "put_single": "put_message, ASYNC, until last readable",
    "put_batch": "put_messages batches, ASYNC, until last readable",
    "put_sync": "put_message, SYNC flush (fsync per put)",
    "get": "get_message max_count=32, touching bodies",
    "lookup": "query_by_key, random existing keys",
    "fsync_probe": "bare write + fdatasync per message (SYNC ceiling)",
}


def target_for(name: str, size: int) -> int | None:
    """The printed (never asserted) target for one Postbox figure, if it has one."""
    if name in ("put_single", "put_batch"):
        return TARGETS["put_msgs_per_s_100b"] if size == 100 else None
    return {"get": TARGETS["get_msgs_per_s"], "lookup": TARGETS["lookups_per_s"]}.get(name)


def verdict(met: bool) -> str:
    """Rich markup for a target met or missed."""
    return "[green]met[/green]" if met else "[red]below[/red]"


def postbox_table(size: int, figures: dict):
    """The Postbox figures for one body size."""
    from rich.table import Table

    table = Table(title=f"Postbox, {size}-byte bodies (median)", title_justify="left",
                  caption="calls only = msgs/s until the last put call returned, before waiting "
                  "for dispatch", caption_justify="left")
    for column in ("operation", "n", "msgs/s", "MB/s", "calls only", "target", ""):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for name in ("put_single", "put_batch", "put_sync", "fsync_probe", "get", "lookup"):
        if name not in figures:
            continue
        figure, target = figures[name], target_for(name, size)
        status = verdict(figure["per_s"] >= target) if target else ""
        if not figure.get("fsync_plausible", True):
            status = "[red]> fdatasync rate: not flushing?[/red]"
        calls = figures.get(f"{name}_calls")
        table.add_row(LABELS[name], f"{figure['count']:,}", f"{figure['per_s']:,.0f}",
                      f"{figure['mb_per_s']:.1f}" if name != "lookup" else "",
                      f"{calls['per_s']:,.0f}" if calls else "",
                      f">= {target:,}" if target else "", status)
    return table


def headline(size: int, postbox: dict, head: dict) -> str:
    """The headline sentence: Postbox async put against the fastest non-fsyncing peer."""
    target = TARGETS["put_ratio_vs_fastest_non_fsync_peer"]
    return (f"[bold]Headline, {size} B:[/bold] Postbox async put_message "
            f"{postbox['put_single']['per_s']:,.0f} msgs/s = {head['single_ratio']:.2f}x the "
            f"fastest non-fsyncing peer ({head['fastest_non_fsync_peer']}, "
            f"{head['peer_put_msgs_per_s']:,.0f} msgs/s) {verdict(head['single_ratio'] >= target)}"
            f"; put_messages {postbox['put_batch']['per_s']:,.0f} msgs/s = "
            f"{head['batch_ratio']:.2f}x {verdict(head['batch_ratio'] >= target)} "
            f"(target >= {target:.0f}x)")


def memory_line(memory: dict) -> str:
    """One paragraph on the ``--memory`` figures."""
    target, millions = TARGETS["heap_mb_5m"], memory["count"] / 1e6
    return (f"[bold]Memory, {memory['count']:,} x 100 B[/bold] (child process, RssAnon sampled "
            f"every {memory['sample_every']:,} messages; mapped store files not counted): peak "
            f"{memory['peak_rss_anon_mb']:.1f} MB (baseline {memory['baseline_rss_anon_mb']:.1f} "
            f"MB before open, +{memory['peak_minus_baseline_mb']:.1f} MB); target < {target} MB "
            f"for 5 M: {verdict(memory['peak_rss_anon_mb'] < target)}"
            f"{'' if millions >= 5 else f' (only {millions:g} M written)'}. VmHWM incl. file "
            f"pages {memory['vm_hwm_mb']:.0f} MB; puts ran at {memory['put_msgs_per_s']:,.0f} "
            "msgs/s.")


def machine_line(title: str, m: dict) -> str:
    """The report's first line: title and the machine facts of ``store_bench.machine_facts``."""
    return (f"[bold]{title}[/bold]: {m['cpu_count']} CPUs ({m['cpu_affinity']} usable, "
            f"{m['cpu_model']}), {m['mem_total_mb']:,} MB RAM, {m['python']}, {m['platform']}")


def render(report: dict) -> None:
    """Print the report as rich tables, machine facts first."""
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160, highlight=False)
    m, s = report["machine"], report["settings"]
    console.print(machine_line("Postbox store benchmark", m))
    console.print(f"temp dirs under {m['tmp_dir']} ({m['tmp_filesystem']}); count={s['count']:,}"
                  f" peer_count={s['peer_count']:,} fsync_peer_count={s['fsync_peer_count']:,} "
                  f"reps={s['reps']} batch={s['batch']} seed={s['seed']}")
    console.print(f"[bold]Note:[/bold] {NOTE}")
    for size, part in report["sizes"].items():
        if part["postbox"]:
            console.print(postbox_table(int(size), part["postbox"]))
        if part["peers"]:
            console.print(peers_table(int(size), part["peers"], part["ratios"]))
        if part["ratios"]["headline"]:
            console.print(headline(int(size), part["postbox"], part["ratios"]["headline"]))
    if report["memory"]:
        console.print(memory_line(report["memory"]))


def peers_table(size: int, peers: list[dict], ratio_info: dict):
    """The peers for one body size, with the like-for-like ratio Postbox / peer."""
    from rich.table import Table

    table = Table(title=f"Peers, {size}-byte bodies (median; ratios = Postbox / peer, like "
                  "with like)", title_justify="left")
    for column in ("peer", "fsync/put", "API", "n", "put msgs/s", "put MB/s", "get msgs/s",
                   "Postbox / peer"):
        table.add_column(column, justify="left" if column == "peer" else "right")
    for peer in peers:
        pair = ratio_info["per_peer"].get(peer["name"])
        ratio = f"{pair['ratio']:.1f}x ({pair['postbox']})" if pair else ""
        if pair and pair["suspect"]:
            ratio += " [red](SYNC suspect)[/red]"
        table.add_row(peer["name"], "yes" if peer["fsync_per_put"] else "no", peer["api"],
                      f"{peer['count']:,}", f"{peer['put_msgs_per_s']:,.0f}",
                      f"{peer['put_mb_per_s']:.1f}", f"{peer['get_msgs_per_s']:,.0f}", ratio)
    table.caption = "\n".join(f"{peer['name']}: {peer['note']}" for peer in peers)
    table.caption_justify = "left"
    return table
