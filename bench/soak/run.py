"""``soak``: one run of the chaos soak (the package docstring says what runs and what is
checked); ``python -m bench.soak`` is its command line."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from bench.peers import BenchError
from bench.soak import checks
from bench.soak.faults import PROFILES, Fault, Injector, Piece, fill_disk, schedule
from bench.soak.figures import figures
from bench.soak.tables import LEDGER_GROUP, SHIPPING_GROUP, business
from bench.soak.topology import (
    TMPFS_MIB,
    Broker,
    Child,
    Service,
    Topology,
    free_port,
    postgres_dir,
    remove_tree,
    tmpfs,
)

log = logging.getLogger("soak")
START_ATTEMPTS = 200


@contextlib.contextmanager
def services(root: Path) -> Iterator[tuple[Service, Service]]:
    """A PostgreSQL and a Redis of the run's own, with the outbox and soak tables."""
    from postbox.outbox import metadata

    pg_base = postgres_dir()
    postgres = Service("postgres", free_port(), pg_base / "data")
    redis = Service("redis", free_port(), root / "redis")
    try:
        postgres.start()
        redis.start()
        engine = create_engine(postgres.url)
        metadata.create_all(engine)
        business.create_all(engine)
        engine.dispose()
        yield postgres, redis
    finally:
        for service in (redis, postgres):
            with contextlib.suppress(BenchError):
                service.kill()
        remove_tree(pg_base)


def brokers(disk: Path, root: Path, pair: bool) -> list[Broker]:
    """The broker (its store on ``disk``), or a SYNC_MASTER on ``disk`` and its slave."""
    if not pair:
        return [Broker.create("broker", disk)]
    ha = free_port()
    master = Broker.create("broker", disk, "--role", "SYNC_MASTER", "--ha-listen",
                           f"127.0.0.1:{ha}", "--slave-timeout-ms", "2000")
    return [master, Broker.create("slave", root, "--role", "SLAVE", "--master-ha",
                                  f"127.0.0.1:{ha}")]


def children(topology: Topology, root: Path, rate: float) -> dict[str, list[Child]]:
    """The producer, relay and consumer processes (not started)."""
    urls = [topology.store_url, topology.postgres.url, topology.redis.url]

    def child(name: str, *argv: str) -> Child:
        return Child(name, [argv[0], *urls, *argv[1:]], root / f"{name}.log")

    return {
        "consumer": [child("consumer-ledger-0", "consume", LEDGER_GROUP),
                     child("consumer-ledger-1", "consume", LEDGER_GROUP),
                     child("consumer-shipping-0", "consume", SHIPPING_GROUP)],
        "relay": [child(f"relay-{index}", "relay") for index in range(2)],
        "producer": [child(f"producer-{index}", "produce", f"{index}:{rate}")
                     for index in range(2)],
    }


def start_retrying(child: Child | Broker) -> None:
    """Start ``child``; a start that fails (the broker or the database still away) is tried
    again."""
    for attempt in range(START_ATTEMPTS):
        try:
            child.start()
            return
        except (BenchError, AssertionError) as error:
            if attempt == START_ATTEMPTS - 1:
                raise
            reasons = [line for line in str(error).splitlines() if "Error" in line]
            log.warning("%s: start failed, again in 2 s: %s", child.name,
                        (reasons or [str(error)])[-1][-200:])
            time.sleep(2)


def pieces(topology: Topology, disk: Path) -> dict[str, Piece]:
    """What the faults take down, by the name the schedule uses."""
    table = {child.name: Piece(lambda _fault, c=child: c.kill(),
                               lambda c=child: start_retrying(c), background=True)
             for child in topology.all_children()}
    master = topology.brokers[0]
    table["broker"] = Piece(
        lambda fault: master.stop() if fault.kind == "broker-outage" else master.kill(),
        lambda: start_retrying(master), background=True)
    if len(topology.brokers) > 1:
        slave = topology.brokers[1]
        table["slave"] = Piece(lambda _fault: slave.kill(), lambda: start_retrying(slave),
                               background=True)
    for service in (topology.postgres, topology.redis):
        table[service.name] = Piece(lambda _fault, s=service: s.kill(), service.start)
    removers: list[Any] = []
    table["disk"] = Piece(lambda _fault: removers.append(fill_disk(disk)),
                          lambda: removers.pop()())
    return table


def kill_targets(topology: Topology) -> list[str]:
    names = [child.name for child in topology.all_children()] + ["broker"]
    return names + (["slave"] if len(topology.brokers) > 1 else [])


def run_phase(topology: Topology, faults: list[Fault], disk: Path,
              duration_s: float) -> tuple[float, float, int]:
    """Play ``faults`` under load; the producers stop once the last fault ended. Returns the
    load phase's start and end, and how many faults were skipped."""
    start = time.time()
    injector = Injector(pieces(topology, disk))
    injector.play(faults, start, start + duration_s)
    time.sleep(max(start + duration_s - time.time(), 0))
    for producer in topology.children["producer"]:
        producer.stop()
    return start, time.time(), injector.skipped


def stop_all(topology: Topology) -> None:
    """Relays, consumers, brokers: each must stop cleanly (exit 0) on SIGTERM."""
    for role in ("producer", "relay", "consumer"):
        for child in topology.children.get(role, []):
            child.stop()
    for broker in reversed(topology.brokers):
        broker.stop()


def kill_all(topology: Topology) -> None:
    for child in topology.all_children():
        child.kill()
    for broker in topology.brokers:
        broker.kill()


def soak(profile_name: str, seed: int, root: Path, *, pair: bool = False) -> dict[str, Any]:
    """One run; returns its schedule, figures and end checks (``passed`` says all held)."""
    profile = PROFILES[profile_name]
    root.mkdir(parents=True, exist_ok=True)
    disk = root / "broker-disk"
    with services(root) as (postgres, redis), tmpfs(disk, TMPFS_MIB) as mounted:
        topology = Topology(postgres, redis, brokers(disk, root, pair))
        topology.children = children(topology, root, profile.rate_per_producer)
        faults = schedule(profile, seed, kill_targets(topology), disk=mounted)
        log.warning("schedule (seed %d): %s", seed,
                    [(round(f.at_s, 1), f.kind, f.target, round(f.duration_s, 1))
                     for f in faults])
        engine = create_engine(postgres.url, pool_pre_ping=True)
        try:
            for broker in topology.brokers:
                broker.start()
            for child in topology.all_children():
                child.spawn()  # at once: a loaded machine takes seconds to import each
            for child in topology.all_children():
                child.wait_ready()
            *phase, skipped = run_phase(topology, faults, disk, profile.duration_s)
            drain_s, state = checks.drain(engine, profile.drain_timeout_s)
            stop_all(topology)
        finally:
            kill_all(topology)
        result = {"profile": profile.name, "seed": seed, "pair": pair,
                  "disk_fault": "tmpfs" if mounted else "none (not root: no tmpfs)",
                  "drain_s": round(drain_s, 1), "skipped_faults": skipped,
                  "drained": "error" not in state and checks.drained(state),
                  "last_state": state,
                  "figures": figures(engine, faults, phase, profile.rate_per_producer
                                     * len(topology.children["producer"])),
                  "checks": checks.end_checks(engine),
                  "restarts": {child.name: child.starts - 1 for child in topology.all_children()},
                  "faults": [(round(f.at_s, 1), f.kind, f.target, round(f.duration_s, 1),
                              f.began is not None) for f in faults]}
        log.warning("before reconcile: %s", {key: result[key] for key in (
            "drained", "drain_s", "figures", "checks")})
        result["reconcile"] = checks.reconcile(topology.brokers[0].store, postgres.url,
                                               root / "reconcile")
        engine.dispose()
    result["passed"] = (result["drained"] and checks.end_checks_pass(result["checks"])
                        and checks.reconcile_pass(result["reconcile"],
                                                  result["checks"]["orders"]))
    return result
