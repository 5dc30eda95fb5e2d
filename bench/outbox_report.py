"""The outbox benchmark's table (``python -m bench.outbox_bench`` without ``--json``): the
figures of each database, and the ``--diagnose`` counters and profile."""

from __future__ import annotations

from bench.outbox_async import render_async


def render(report: dict) -> None:
    s = report["settings"]
    print(f"Outbox pipeline benchmark: {s['messages']:,} messages (after {s['warmup']} warm-up),"
          f" {s['producer_threads']} producer threads, {s['consumer_threads']} consume threads,"
          f" median of {s['repeat']}; Redis: {s['redis']}; {s['cpu_count']} CPUs")
    for note in report["notes"]:
        print(f"  note: {note}")
    for name, result in report["databases"].items():
        f = result["figures"]
        print(f"\n{name}  ({result['url']})")
        rows = [("bare producer (order row, commit)", f["bare_producer_per_s"],
                 f["bare_producer_cpu_ms"]),
                ("bare consumer (ledger row, commit)", f["bare_consumer_per_s"],
                 f["bare_consumer_cpu_ms"]),
                ("bare combined (one after the other)", f["bare_combined_per_s"],
                 f["bare_producer_cpu_ms"] + f["bare_consumer_cpu_ms"]),
                ("database floor (its statements, no msgs)", f["floor_per_s"],
                 f["floor_cpu_ms"]),
                ("pipeline end to end (exactly once)", f["pipeline_per_s"],
                 f["pipeline_cpu_ms"]),
                ("  its producer transactions alone", f["pipeline_producer_per_s"], None)]
        print(f"  {'':<40} {'msgs/s':>9}   process CPU ms/msg")
        for label, value, cpu_ms in rows:
            cpu = "" if cpu_ms is None else f"{cpu_ms:8.2f}"
            print(f"  {label:<40} {value:>9,.0f}   {cpu}")
        met = "met" if f["ratio"] >= report["target_ratio"] else "NOT met"
        print(f"  {'ratio pipeline / bare combined':<40} {f['ratio']:>9.2f}   "
              f"(target >= {report['target_ratio']:.2f}: {met})")
        print(f"  {'ratio database floor / bare combined':<40} {f['floor_ratio']:>9.2f}   "
              "(the most the pipeline could reach; the rest of its CPU is messaging)")
        render_async(f, result["reps"][-1].get("async_pipeline", {}))
        if "processes_per_s" in f:
            processes = result["reps"][-1]["processes"]["processes"]
            print(f"  {'pipeline, ' + str(processes) + ' consumer processes (rocketmq://)':<40} "
                  f"{f['processes_per_s']:>9,.0f}")
            print(f"  {'ratio those processes / one process':<40} "
                  f"{f['processes_vs_one_process']:>9.2f}   (target >= 1.50: "
                  f"{'met' if f['processes_vs_one_process'] >= 1.5 else 'NOT met'})")
            print(f"  {'ratio those processes / bare combined':<40} "
                  f"{f['processes_vs_bare']:>9.2f}   (target >= 0.50: "
                  f"{'met' if f['processes_vs_bare'] >= 0.5 else 'NOT met'})")
            if "split_ceiling" in f:
                print(f"  machine (every process): one-process pipeline "
                      f"{f['pipeline_machine_cores']:.2f} cores busy, "
                      f"{f['pipeline_machine_cpu_ms']:.2f} ms CPU/msg; with the consumer "
                      f"processes {f['processes_machine_cores']:.2f} cores, "
                      f"{f['processes_machine_cpu_ms']:.2f} ms/msg")
                print(f"  {'split ceiling at one-process CPU/msg':<40} "
                      f"{f['split_ceiling']:>9.2f}   (cores / one-process busy cores; a split "
                      "cheaper per message goes beyond it)")
        last = result["reps"][-1]["pipeline"]
        print(f"  relay published by hook / by poll        "
              f"{last['published_by_hook']:,} / {last['published_by_poll']:,}")
        print(f"  consumer admission rounds (receipt txn + SET NX round trip) per message "
              f"{last['admission_rounds'] / s['messages']:.2f}")
        d = last["duplicates"]
        share = "n/a" if f["redis_share"] is None else f"{f['redis_share']:.1%}"
        print(f"  duplicates: {d['sent']:,} rejected at {f['duplicates_per_s']:,.0f} msgs/s; "
              f"Redis fast path {share} ({d['by_redis']:,} Redis / {d['by_database']:,} "
              f"database); acquire p50 {f['acquire_p50_ms']:.3f} ms, "
              f"p99 {f['acquire_p99_ms']:.3f} ms ({d['acquire_samples']:,} samples)")
        if d["processed"] or d["database_errors"] or d["failures"] or d["taken_over"]:
            print(f"  duplicate phase oddities: processed {d['processed']}, taken over "
                  f"{d['taken_over']}, database errors {d['database_errors']}, failures "
                  f"{d['failures']}")
        if "diagnose" in result:
            render_diagnose(result["diagnose"])


def render_diagnose(diag: dict) -> None:
    print(f"  diagnose: unprofiled {diag['unprofiled_seconds']:.2f} s, profiled "
          f"{diag['profiled_seconds']:.2f} s")
    commits = ", ".join(f"{role} {n:.2f}" for role, n in
                        sorted(diag["commits_per_message"].items()))
    statements = ", ".join(f"{role} {n:.2f}" for role, n in
                           sorted(diag["statements_per_message"].items()))
    print(f"    commits per message: {commits}")
    print(f"    statements per message: {statements}")
    print("    statement kinds: per message, wall ms per message (summed over threads)")
    for kind, (n, ms) in diag["statement_kinds_per_message"].items():
        print(f"      {kind:<45} {n:5.2f} {ms:8.2f} ms")
    print("    thread CPU by part (profiled, ms per message; cProfile inflates it ~4x):")
    for label, ms in diag["cpu_by_part_ms_per_message"].items():
        print(f"      {label:<57} {ms:7.2f}")
    for title, key in (("top cumulative (thread CPU)", "top_cumulative"),
                       ("top own", "top_own")):
        print(f"    {title}:")
        for row in diag[key]:
            print(f"      {row['cumulative_s']:>7.2f} cum {row['own_s']:>7.2f} own "
                  f"{row['calls']:>9,}  {row['function']}")
