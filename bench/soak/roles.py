"""The soak's child processes: ``python -m bench.soak.roles ROLE STORE_URL DATABASE_URL
REDIS_URL [ARG]``.

- ``produce INDEX:RATE``: orders at ``RATE`` per second, each an order row and its stub in one
  transaction (``outbox.send``); it never publishes (its relay is detached: the relay processes
  poll). A failed transaction (PostgreSQL away) is not retried: that order was never committed.
- ``relay``: an ``Outbox`` whose relay thread polls every 200 ms, and the resend rule
  (``OutboxWorker.resend_due``) every second.
- ``consume GROUP``: the group's handler, ``idempotent=True`` (``soak-shipping``'s is an
  ``async def``), one ``soak_effects`` row per handling.

Each prints ``ready`` once it runs, and stops cleanly on SIGTERM (exit 0); the harness kills
them with SIGKILL too. Errors go to stderr (a file of the run)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

from sqlalchemy import insert

from bench.soak.tables import (
    GROUPS,
    RELAY_OPTIONS,
    RULES,
    SHIPPING_GROUP,
    TOPIC,
    effects,
    orders,
)

READY = "ready"
log = logging.getLogger("soak")


def _stopping() -> threading.Event:
    """An event SIGTERM sets."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def produce(store_url: str, database_url: str, spec: str) -> None:
    """Orders at a steady rate until SIGTERM (see the module docstring)."""
    from postbox import outbox
    from postbox.framework import App

    index, rate = spec.split(":")
    app = App(store_url=store_url, database_url=database_url)  # never started: no relay here
    box = outbox.Outbox(app, consumer_groups={TOPIC: GROUPS})
    box.relay.detach()
    stop = _stopping()
    prefix = f"p{index}-{uuid.uuid4().hex[:8]}"
    interval, due, sequence = 1 / float(rate), time.monotonic(), 0
    print(READY, flush=True)
    while not stop.is_set():
        due += interval
        order_no = f"{prefix}-{sequence}"
        sequence += 1
        try:
            with box.session.begin() as session:
                message_id = outbox.send(session, TOPIC, json.dumps({"order": order_no}),
                                         keys=[order_no])
                session.execute(insert(orders).values(
                    order_no=order_no, producer=int(index), message_id=message_id,
                    committed_at=time.time()))
        except Exception as error:  # PostgreSQL away: this order is not committed
            log.warning("order %s not committed: %s", order_no, str(error).splitlines()[0])
        stop.wait(max(due - time.monotonic(), 0))
        due = max(due, time.monotonic() - 1)  # after an outage: no burst to catch up


def relay(store_url: str, database_url: str) -> None:
    """The polling relay and the resend rule until SIGTERM."""
    from postbox import outbox
    from postbox.framework import App

    app = App(store_url=store_url, database_url=database_url)
    box = outbox.Outbox(app, options=RELAY_OPTIONS, consumer_groups={TOPIC: GROUPS})
    worker = outbox.OutboxWorker(app, engine=box.engine, rules=RULES,
                                 relay_options=RELAY_OPTIONS,
                                 schedule=outbox.TaskSchedule(resend_due_s=1.0))
    stop = _stopping()
    app.start()
    print(READY, flush=True)
    try:
        while not stop.wait(1.0):
            try:
                worker.resend_due()
            except Exception as error:  # the database or the broker away: next second
                log.warning("resend_due: %s", str(error).splitlines()[0])
    finally:
        app.stop()


def _effect(message: Any, group: str) -> Any:
    return insert(effects).values(consumer_group=group,
                                  order_no=json.loads(message.body)["order"],
                                  message_id=message.msg_id, handled_at=time.time(),
                                  pid=os.getpid())


def consume(store_url: str, database_url: str, redis_url: str, group: str) -> None:
    """The group's handler until SIGTERM."""
    from postbox.framework import App

    app = App(store_url=store_url, database_url=database_url, redis_url=redis_url)
    if group == SHIPPING_GROUP:
        @app.handler(topic=TOPIC, consumer_group=group, consume_from="first", idempotent=True)
        async def ship(message: Any, session: Any) -> None:
            await session.execute(_effect(message, group))
    else:
        @app.handler(topic=TOPIC, consumer_group=group, consume_from="first", idempotent=True)
        def bill(message: Any, session: Any) -> None:
            session.execute(_effect(message, group))
    stop = _stopping()
    app.start()
    print(READY, flush=True)
    try:
        stop.wait()
    finally:
        app.stop()


def main(argv: list[str]) -> int:
    """``ROLE STORE_URL DATABASE_URL REDIS_URL [ARG]`` (module docstring)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    role, store_url, database_url, redis_url, *rest = argv
    if role == "produce":
        produce(store_url, database_url, *rest)
    elif role == "relay":
        relay(store_url, database_url)
    elif role == "consume":
        consume(store_url, database_url, redis_url, *rest)
    else:
        print(f"unknown role {role!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
