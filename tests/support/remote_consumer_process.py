"""A consumer process of group ``g`` on topic ``events`` of a remote broker.

Run from the repository root::

    python -m tests.support.remote_consumer_process --store-url URL --handled FILE

For every message it appends ``queue_id offset body`` to ``--handled``; about every 20 ms it
rewrites ``FILE.queues`` with the queues this consumer holds (``topic queue_id`` lines), so the
parent can wait for the group's assignment to settle. It prints ``ready`` once consuming and
runs until stdin closes, then stops cleanly (drain, commit offsets, leave the group).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from postbox.framework import App, ConsumerOptions

OPTIONS = ConsumerOptions(persist_interval_ms=100, long_polling_ms=500,
                          rebalance_interval_ms=200)


def _report_queues(app: App, path: Path, stop: threading.Event) -> None:
    while not stop.wait(0.02):
        queues = app.consumer("g").assigned_queues()
        temporary = path.with_suffix(".tmp")
        temporary.write_text("".join(f"{q.topic} {q.queue_id}\n" for q in queues),
                             encoding="utf-8")
        os.replace(temporary, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--handled", required=True)
    args = parser.parse_args()
    handled = open(args.handled, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
    lock = threading.Lock()
    app = App(store_url=args.store_url, consumer_options=OPTIONS)

    @app.handler(topic="events", consumer_group="g", consume_from="first")
    def record(message) -> None:
        with lock:
            handled.write(f"{message.queue_id} {message.queue_offset} {message.text}\n")
            handled.flush()

    app.start()
    stop = threading.Event()
    reporter = threading.Thread(target=_report_queues,
                                args=(app, Path(args.handled + ".queues"), stop))
    reporter.start()
    print("ready", flush=True)
    sys.stdin.read()
    stop.set()
    reporter.join()
    app.stop()
    handled.close()


if __name__ == "__main__":
    main()
