"""Hostile peers benchmark: each attack on the remoting listeners against a real broker process,
a well-behaved client sending throughout.

Run ``python -m bench.hostile_peers_bench`` (``--quick`` for a smoke run, ``--only a,b`` for
some attacks, ``--json`` for one JSON document on stdout; progress goes to stderr). Each attack
gets a fresh ``COMMAND -v broker start`` (``--broker-command``, default this tree's
``postbox``; point it at an older tree's ``postbox`` to measure that broker) with the three
listeners on free ports and small store files. Per attack it prints:

* ``alive``: both listeners (broker and name server) serve a new connection after the attack;
* ``rss``: the broker's RSS before and its peak growth (``VmRSS`` sampled every 50 ms, and
  ``VmHWM``); past ``--memory-cap-mib`` (1 536) the bench kills the broker ("capped");
* ``good``: a client connected before the attack sends one message every 50 ms (5 s timeout,
  a new connection after a failure): sends that succeeded of all, their latency p50/p99;
* ``new``: of 10 new connections opened while the attack is at its worst, how many were served
  (3 s each);
* figures of the attack itself (log lines, files open, topics created, forged messages...).

Every attack is bounded in time (full: at most about a minute each; ``--quick`` a few seconds).
Figures are printed, never asserted; the exit code is 2 when an attack could not run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import hostile_frames as frames
from bench import hostile_requests as requests
from bench.hostile_harness import (
    FD_LIMIT_WRAPPER,
    BrokerUnderTest,
    GoodClient,
    MemoryWatch,
    listener_alive,
    new_clients_served,
    one_line,
    served_once,
)
from bench.store_bench import machine_facts

POSTBOX = str(Path(sys.executable).with_name("postbox"))


@dataclass(frozen=True)
class Attack:
    """One attack and the broker it needs."""

    name: str
    what: str
    run: Callable[[Any], dict[str, object]]
    conf: str = ""
    fd_limit: int = 0  # 0: the bench's own; else the broker's RLIMIT_NOFILE (soft and hard)
    quick_fd_limit: int = 0  # the limit of the --quick profile (0: fd_limit)
    acl: bool = False
    kill_at_end: bool = False
    after: Callable[[Any, Any], dict[str, object]] | None = None


ATTACKS = [
    Attack("nested-header", "JSON header nested 1 000 deep", frames.nested_header),
    Attack("lone-surrogates", "\\ud800 in values answers echo", frames.lone_surrogates),
    Attack("unread-pulls", "800 pipelined pulls (quick 300), never read", frames.unread_pulls),
    Attack("slow-sockets", "1 023 sockets trickling 1 byte/s", frames.slow_sockets),
    Attack("heartbeat-groups", "heartbeat naming 9 998 groups", requests.heartbeat_groups),
    Attack("query-flood", "8 connections of pipelined queries, SYNC_FLUSH",
           requests.query_flood, conf="flushDiskType=SYNC_FLUSH\n"),
    Attack("queue-files", "one message per queue under RLIMIT_NOFILE", requests.queue_files,
           fd_limit=1024, quick_fd_limit=256, kill_at_end=True, after=requests.queue_files_restart),
    Attack("retry-forgery", "SUB-only key plants 'orders' via %RETRY%", requests.retry_forgery,
           acl=True),
    Attack("route-hijack", "unauthenticated REGISTER_BROKER", requests.route_hijack),
    Attack("signature-replay", "captured signatures replayed as a delete",
           requests.signature_replay, acl=True),
    Attack("parked-polls", "closed connections' parked long polls", requests.parked_polls),
    Attack("descriptor-flood", "600 connections at RLIMIT_NOFILE 400", frames.descriptor_flood,
           fd_limit=400),
]


class AttackRun:
    """What an attack function gets: the broker, the profile's lengths, ``probe``."""

    def __init__(self, broker: BrokerUnderTest, args: argparse.Namespace, attack: Attack,
                 watch: MemoryWatch | None = None) -> None:
        self.broker, self.attack, self.watch = broker, attack, watch
        self.long_s = 8.0 if args.quick else args.seconds
        self.short_s = 1.0 if args.quick else 3.0
        self.queue_count = 320 if args.quick else 1600
        self.pull_count = 300 if args.quick else 800
        self.full = not args.quick
        self.poll_connections = 4 if args.quick else 24
        self.fd_limit = attack.fd_limit
        self.probes: list[str] = []
        self.sign = requests.sign_ops if attack.acl else None
        self.spawned: list[BrokerUnderTest] = []
        self._spawn: Callable[[Path], BrokerUnderTest] | None = None

    def fresh_broker(self) -> BrokerUnderTest:
        """Another broker like this one, in a new directory (stopped after the attack); the
        well-behaved client and the memory watch stay on the first."""
        assert self._spawn is not None
        work = self.broker.work / f"fresh-{len(self.spawned)}"
        work.mkdir()
        self.spawned.append(self._spawn(work))
        return self.spawned[-1]

    def probe(self) -> str:
        """How many of 10 new clients are served now (``k/10``), recorded."""
        served = new_clients_served(self.broker.remoting, 10, sign=self.sign)
        self.probes.append(f"{served}/10")
        return self.probes[-1]

    def rebase_memory(self) -> None:
        """Measure memory growth from now (after the attack's own setup)."""
        if self.watch is not None:
            self.watch.stop()
            self.watch = MemoryWatch(self.broker, self.watch.cap_kib << 10)


def write_acl(work: Path) -> Path:
    """The ACL file of the attacks that need one."""
    path = work / "acl.json"
    path.write_text(json.dumps(requests.ACL))
    return path


def start_broker(command: list[str], work: Path, attack: Attack, limit: int
                 ) -> BrokerUnderTest:
    """A broker for ``attack`` in ``work``."""
    prefix = (sys.executable, "-c", FD_LIMIT_WRAPPER, str(limit)) if limit else ()
    return BrokerUnderTest(command, work, conf=attack.conf, prefix=prefix,
                           acl=write_acl(work) if attack.acl else None).start()


def run_attack(attack: Attack, args: argparse.Namespace, root: Path) -> dict[str, object]:
    """One attack on a fresh broker; its figures."""
    work = root / attack.name
    work.mkdir()
    limit = (attack.quick_fd_limit or attack.fd_limit) if args.quick else attack.fd_limit
    broker = start_broker(args.broker_command, work, attack, limit)
    sign = requests.sign_ops if attack.acl else None
    figures: dict[str, object] = {"attack": attack.name, "what": attack.what}
    try:
        served_once(broker.remoting, "127.0.0.2", 10, sign=sign)  # the Good topic exists
        watch = MemoryWatch(broker, args.memory_cap_mib << 20)
        good = GoodClient(broker.remoting, sign=sign)
        run = AttackRun(broker, args, attack, watch)
        run.fd_limit = limit
        run._spawn = lambda directory: start_broker(args.broker_command, directory, attack, limit)
        started = time.monotonic()
        try:
            figures.update(attack.run(run))
        except Exception as error:  # the attack could not run against this broker
            figures["error"] = one_line(f"{type(error).__name__}: {error}", 200)
        figures["seconds"] = round(time.monotonic() - started, 1)
        time.sleep(max(0.0, 2 * run.short_s - (time.monotonic() - started)))
        if not run.probes:
            run.probe()
        figures.update(good.stop())
        figures["new_clients_served"] = " ".join(run.probes)
        figures["alive"] = listener_alive(broker, sign=sign)
        figures.update((run.watch or watch).stop())
        figures["process_up"] = broker.running()
    finally:
        for spawned in run.spawned if "run" in locals() else ():
            spawned.stop()
        if attack.kill_at_end:
            broker.kill()
        else:
            broker.stop()
    if attack.after is not None and "error" not in figures:
        figures.update(_after(attack, args, work, limit))
    return figures


def _after(attack: Attack, args: argparse.Namespace, work: Path, limit: int
           ) -> dict[str, object]:
    """The attack's check on a restarted broker (same store and limit)."""
    assert attack.after is not None
    shutil.move(work / "broker.log", work / "broker-first.log")
    try:
        restarted = start_broker(args.broker_command, work, attack, limit)
    except RuntimeError as error:
        return {"restart": "failed: " + one_line(str(error)[-300:])}
    try:
        return attack.after(None, restarted)
    except Exception as error:  # the restarted broker does not serve
        return {"restart": one_line(f"{type(error).__name__}: {error}")}
    finally:
        restarted.stop()


COMMON_KEYS = ("attack", "what", "alive", "process_up", "rss_before_mib", "rss_peak_delta_mib",
               "memory_capped", "good_sends_ok", "good_sends", "good_p50_ms", "good_p99_ms",
               "new_clients_served", "seconds")


def table(results: list[dict[str, object]]) -> str:
    """One block of lines per attack."""
    lines = [f"{'attack':<17} {'alive':<5} {'rss +MiB':>9} {'good ok/all':>12} "
             f"{'p50 ms':>8} {'p99 ms':>8}  new served"]
    for result in results:
        rss = f"{result.get('rss_peak_delta_mib', '?')}"
        if result.get("memory_capped"):
            rss += " CAP"
        alive = "yes" if result.get("alive") else "no"
        if not result.get("process_up", True):
            alive += "*"
        good = f"{result.get('good_sends_ok', '?')}/{result.get('good_sends', '?')}"
        lines.append(f"{result['attack']:<17} {alive:<5} {rss:>9} {good:>12} "
                     f"{_ms(result.get('good_p50_ms')):>8} {_ms(result.get('good_p99_ms')):>8}"
                     f"  {result.get('new_clients_served', '?')}")
        extra = {key: value for key, value in result.items() if key not in COMMON_KEYS}
        lines.append("    " + "; ".join(f"{key}={value}" for key, value in extra.items()))
    lines.append("alive: both listeners serve a new connection afterwards (* the process is "
                 "gone); CAP: killed by the bench at the memory cap")
    return "\n".join(lines)


def _ms(value: object) -> str:
    return "-" if value is None else str(value)


def compare(before: dict[str, Any], after: dict[str, Any]) -> str:
    """A Markdown table of two ``--json`` documents, attack by attack: ``before → after``."""
    rows = ["| attack | listeners alive | RSS peak growth, MiB | good sends ok | good p50 / p99 "
            "ms | new clients served | attack figures |", "|---" * 7 + "|"]
    older = {result["attack"]: result for result in before["attacks"]}
    for new in after["attacks"]:
        old = older.get(new["attack"], {})

        def pair(render: Callable[[dict[str, Any]], str], old: dict[str, Any] = old,
                 new: dict[str, Any] = new) -> str:
            return f"{render(old) if old else 'n/a'} → {render(new)}"

        extra = [f"{key} {pair(lambda result, key=key: str(result.get(key, '-')))}"
                 for key in new if key not in COMMON_KEYS]
        rows.append("| " + " | ".join([
            new["attack"],
            pair(lambda r: ("yes" if r.get("alive") else "no")
                 + ("" if r.get("process_up", True) else " (gone)")),
            pair(lambda r: f"{r.get('rss_peak_delta_mib')}"
                 + (" (capped)" if r.get("memory_capped") else "")),
            pair(lambda r: f"{r.get('good_sends_ok')}/{r.get('good_sends')}"),
            pair(lambda r: f"{_ms(r.get('good_p50_ms'))} / {_ms(r.get('good_p99_ms'))}"),
            pair(lambda r: str(r.get("new_clients_served"))),
            "; ".join(extra)]) + " |")
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.hostile_peers_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 8 s attacks, smaller floods, RLIMIT_NOFILE 256")
    p.add_argument("--only", default="", help="comma-separated attacks (default: all): "
                   + ",".join(attack.name for attack in ATTACKS))
    p.add_argument("--broker-command", default=POSTBOX,
                   help="the postbox command to start ('CMD -v broker start ...'); "
                        "an older tree's .venv/bin/postbox measures that broker")
    p.add_argument("--seconds", type=float, default=40.0,
                   help="length of the timed attacks (full profile)")
    p.add_argument("--memory-cap-mib", type=int, default=1536,
                   help="kill the broker when its RSS grew by more than this")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="print a Markdown table of two --json documents and exit")
    p.add_argument("--keep", action="store_true", help="keep the stores and broker logs")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    names = [name for name in args.only.split(",") if name]
    known = {attack.name for attack in ATTACKS}
    if not set(names) <= known:
        p.error(f"unknown attacks {sorted(set(names) - known)}; known: {sorted(known)}")
    args.attacks = [attack for attack in ATTACKS if not names or attack.name in names]
    args.broker_command = args.broker_command.split()
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the attacks; print the table (or JSON). 2 when an attack could not run."""
    args = parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(path).read_text()) for path in args.compare)
        print(compare(before, after))
        return 0
    results = []
    root = Path(tempfile.mkdtemp(prefix="hostile-bench-", dir=args.dir))
    try:
        for attack in args.attacks:
            print(f"[hostile] {attack.name}: {attack.what}", file=sys.stderr, flush=True)
            try:
                results.append(run_attack(attack, args, root))
            except RuntimeError as error:  # the broker did not start
                results.append({"attack": attack.name, "what": attack.what,
                                "error": str(error)[-300:]})
            print(f"[hostile] {attack.name}: {json.dumps(results[-1], default=str)}",
                  file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"[hostile] kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    document = {"machine": machine_facts(args), "broker_command": args.broker_command,
                "quick": args.quick, "attacks": results}
    if args.json:
        print(json.dumps(document, indent=2, default=str))
    else:
        print(f"broker: {' '.join(args.broker_command)}")
        print(table(results))
    return 2 if any("error" in result for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
