"""``bench.broker_load_bench``'s parts that need no lab: its options and the CPU sampler that
reads a process's CPU time over a wall-clock span (the lab run is ``tests/lab/
test_broker_load_bench.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import broker_load_bench as bench


def test_cpu_sampler_reads_a_busy_span_and_an_idle_one() -> None:
    with bench.CpuSampler(os.getpid()) as cpu:
        busy_from = time.time()
        while time.time() - busy_from < 0.6:
            sum(range(1000))
        busy_to = time.time()
        time.sleep(0.6)
        idle_to = time.time()
    busy = cpu.between(busy_from + 0.1, busy_to - 0.1)
    idle = cpu.between(busy_to + 0.1, idle_to - 0.1)
    assert 0.1 < busy <= 0.5  # one thread spinning: up to 0.4 s of CPU in 0.4 s
    assert idle < 0.05


@pytest.mark.parametrize("argv", [["--modes", "burst"], ["--targets", "kafka"],
                                  ["--sizes", "100,big"], ["--threads", "0"],
                                  ["--window-s", "0"]])
def test_bad_options_are_refused(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        bench.parse_args(argv)
    assert exited.value.code == 2
    assert "error" in capsys.readouterr().err


def test_quick_profile_settings() -> None:
    args = bench.parse_args(["--quick"])
    assert (args.warmup_s, args.window_s) == (1.0, 2.0)
    assert bench.loads(args) == [("sync", 100), ("sync", 1024), ("async", 100),
                                 ("async", 1024), ("tx", 100), ("tx", 1024)]


def test_transactional_ratios_per_size_and_postbox_over_java() -> None:
    def load(per_s: float) -> dict:
        return {"send_per_s": per_s}
    results = {"java": {"sync-100": load(1000), "tx-100": load(600), "async-100": load(900)},
               "postbox": {"sync-100": load(500), "tx-100": load(250), "sync-1024": load(400),
                           "tx-1024": load(100)}}
    found = bench.transaction_ratios(results)
    assert found == {"100": {"java": 0.6, "postbox": 0.5, "postbox_over_java": 0.5 / 0.6},
                     "1024": {"postbox": 0.25}}


def test_postbox_bench_broker_load_hands_arguments_to_the_benchmark() -> None:
    postbox = Path(sys.executable).with_name("postbox")
    done = subprocess.run([str(postbox), "bench", "broker-load", "--help"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--in-flight" in done.stdout
