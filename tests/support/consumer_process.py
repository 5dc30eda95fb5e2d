"""A consumer process meant to be killed with SIGKILL (the subject of
``tests/framework/test_consumer_crash.py``).

Run from the repository root::

    python -m tests.support.consumer_process --root DIR-OR-STORE-URL --handled FILE

It opens the store at ``--root`` through ``App(store_url=…)`` with small segments and short
offset-persistence intervals, consumes topic ``events`` as group ``g`` from the first offset,
and for every message appends ``queue_id offset body`` to ``--handled`` and fsyncs it before the
handler returns, so the parent knows every message whose handler completed. It prints
``ready`` once consuming has started and runs until killed (or until stdin closes).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from postbox.framework import App, ConsumerOptions

BROKER_CONF = {
    "mappedFileSizeCommitLog": str(1024 * 1024),
    "mappedFileSizeConsumeQueue": str(1000 * 20),
    "maxHashSlotNum": "1024",
    "maxIndexNum": "4096",
    "flushConsumerOffsetInterval": "50",
}
def embedded_conf(store_url: str, conf: dict[str, str]) -> dict[str, str] | None:
    """``conf`` for an embedded store; None for a remote broker (configured where it runs)."""
    return None if store_url.startswith("rocketmq://") else conf


OPTIONS = ConsumerOptions(persist_interval_ms=50, long_polling_ms=200, pull_batch_size=8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--handled", required=True)
    args = parser.parse_args()
    handled = open(args.handled, "a", encoding="utf-8")  # noqa: SIM115 - lives until the kill
    lock = threading.Lock()
    app = App(store_url=args.root, broker_conf=embedded_conf(args.root, BROKER_CONF),
              consumer_options=OPTIONS)

    @app.handler(topic="events", consumer_group="g", consume_from="first")
    def record(message) -> None:
        with lock:
            handled.write(f"{message.queue_id} {message.queue_offset} {message.text}\n")
            handled.flush()
            os.fsync(handled.fileno())

    app.start()
    print("ready", flush=True)
    sys.stdin.read()  # the parent kills us; EOF means a clean stop was asked for
    app.stop()


if __name__ == "__main__":
    main()
