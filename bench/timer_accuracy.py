"""Timer accuracy under load: how late timer messages reach their topic.

``python -m bench.timer_accuracy [--timers N] [--span-s S] [--load-per-s R]`` opens a broker on
a fresh store in a temporary directory, sends ``N`` timer messages (``TIMER_DELIVER_MS`` spread
at random over the next ``S`` seconds) while a second thread sends ``R`` normal messages a
second to another topic, waits until every timer message is in its topic, and prints the
lateness of each — the delivered copy's store timestamp minus its ``TIMER_DELIVER_MS`` — as
min, median, p99, max (ms), plus how many came early (none expected). Messages whose moment had
passed when they were sent (stored at once, not timers) are left out.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from postbox.storage_engine import Broker, Message, StoreConfig

TOPIC, LOAD_TOPIC = "bench-timed", "bench-load"
BODY = b"x" * 100


def _load(broker: Broker, per_s: int, stop: threading.Event) -> None:
    interval = 1 / per_s if per_s else None
    while interval and not stop.is_set():
        broker.send(Message(LOAD_TOPIC, BODY))
        time.sleep(interval)


def _read_all(broker: Broker) -> list:
    views: list = []
    while batch := broker.pull("bench", TOPIC, 0, len(views), 32).messages:
        views.extend(batch)
    return views


def measure(root: Path, timers: int, span_s: float, load_per_s: int) -> list[int]:
    """Lateness (ms) of each timer message."""
    with Broker.open(StoreConfig(root_dir=root)) as broker:
        broker.create_topic(TOPIC, 1)
        stop = threading.Event()
        loader = threading.Thread(target=_load, args=(broker, load_per_s, stop), daemon=True)
        loader.start()
        start = int(time.time() * 1000)
        for _ in range(timers):
            deliver_ms = start + 300 + random.randrange(int(span_s * 1000))
            broker.send(Message(TOPIC, BODY, properties={"TIMER_DELIVER_MS": str(deliver_ms)}),
                        queue_id=0)
        deadline = time.monotonic() + span_s + 60
        views = _read_all(broker)
        while len(views) < timers and time.monotonic() < deadline:  # every one, then stop
            time.sleep(0.2)
            views = _read_all(broker)
        stop.set()
        loader.join()
    return sorted(view.store_timestamp_ms - int(view.properties["TIMER_DELIVER_MS"])
                  for view in views if "TIMER_OUT_MS" in view.properties)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=3000)
    parser.add_argument("--span-s", type=float, default=10.0)
    parser.add_argument("--load-per-s", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        lateness = measure(Path(directory), args.timers, args.span_s, args.load_per_s)
    p99 = lateness[max(0, int(len(lateness) * 0.99) - 1)]
    print(f"{len(lateness)}/{args.timers} sent as timers; lateness ms: min "
          f"{lateness[0]} median {statistics.median(lateness)} p99 {p99} max {lateness[-1]}; "
          f"early {sum(1 for value in lateness if value < 0)}")


if __name__ == "__main__":
    main()
