"""A consumer process with an idempotent handler, for the exactly-once and kill -9 tests.

Run from the repository root::

    python -m tests.support.idempotent_consumer --store DIR --db URL --redis URL \
        [--fail-rate 0.2] [--seed N] [--block-file FILE] [--start-on-go]

It consumes topic ``orders`` as group ``billing`` from the first offset with 8 consume threads
and millisecond delay levels. The handler inserts a ``ledger`` row (key: message id) in the
transaction the idempotency middleware gives it, then fails with probability ``--fail-rate``
(after the insert, so the rollback has something to undo). With ``--block-file``, the first
message's handler writes its message id to that file after the insert is flushed and then
blocks forever: the parent kills the process there. With ``--start-on-go`` it prints ``loaded``
once its handler is registered and starts consuming only when a ``go`` line arrives on stdin, so
two processes can start together. It prints ``ready`` once consuming and runs until stdin closes.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

from sqlalchemy import Column, MetaData, String, Table, insert

from postbox.framework import App, ConsumerOptions
from tests.support.consumer_process import BROKER_CONF, embedded_conf

MS_DELAY_LEVELS = " ".join(f"{20 * level}ms" for level in range(1, 19))
business = MetaData()
ledger = Table("ledger", business,
               Column("message_id", String(128), primary_key=True),
               Column("pid", String(16), nullable=False))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block-file")
    parser.add_argument("--start-on-go", action="store_true")
    args = parser.parse_args()
    chance = random.Random(args.seed)
    lock = threading.Lock()
    blocked = threading.Event()
    app = App(store_url=args.store, database_url=args.db, redis_url=args.redis,
              broker_conf=embedded_conf(args.store, {**BROKER_CONF,
                                                     "messageDelayLevel": MS_DELAY_LEVELS}),
              consumer_options=ConsumerOptions(consume_thread_count=8, persist_interval_ms=50,
                                               long_polling_ms=200))

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    def bill(message, session) -> None:
        session.execute(insert(ledger).values(message_id=message.msg_id, pid=str(os.getpid())))
        session.flush()
        if args.block_file and not blocked.is_set():
            blocked.set()
            with open(args.block_file, "w", encoding="utf-8") as marker:
                marker.write(message.msg_id)
            while True:
                time.sleep(3600)  # killed here
        with lock:
            fail = chance.random() < args.fail_rate
        if fail:
            raise RuntimeError("injected handler failure")

    if args.start_on_go:
        print("loaded", flush=True)
        if sys.stdin.readline().strip() != "go":
            return
    app.start()
    print("ready", flush=True)
    sys.stdin.read()
    app.stop()


if __name__ == "__main__":
    main()
