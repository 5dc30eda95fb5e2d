"""``python -m bench.outbox_bench --async``: the asyncio pipeline, measured in the same run as
the sync one and reported beside it.

**Async pipeline** (same database, tables reset, same N, warm-up and producer concurrency): an
``App`` as in the sync pipeline with an ``Outbox(app, async_engine=...)`` (the app's database
through asyncpg / aiosqlite) and an ``async def`` ``idempotent=True`` handler ``bill(message,
session)`` that inserts the ``bench_ledger`` row through its ``AsyncSession``. The producer side
is ``--producer-threads`` P coroutines on one event loop in the main thread (what one asyncio
web server process runs), each running its share of N transactions ``async with
box.async_session.begin(): insert bench_orders row; await outbox.send(session, ...)``. The
clock runs from the first transaction until a count query sees every stub ``confirmed``; the
ledger must then hold one row per message (``BenchError`` otherwise). The relay and the
consumer's receipt/Redis admission are the sync ones (they run in threads either way); the
handler transaction runs on the consumer's event loop.

Figures: async msgs/s and producer-side msgs/s, process CPU per message, and the ratios
async / sync of the same run (pipeline and producer side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert

from bench.outbox_baselines import (
    TOPIC,
    Target,
    body_of,
    count_rows,
    cpu_s,
    ledger_rows,
    order_row,
    orders,
)
from bench.peers import BenchError


def register_async_bill(app: Any, group: str) -> None:
    """The async twin of the bench's ``bill``: one ``bench_ledger`` row per message."""

    @app.handler(topic=TOPIC, consumer_group=group, consume_from="first", idempotent=True)
    async def bill(message: Any, session: Any) -> None:
        data = json.loads(message.body)
        await session.execute(insert(ledger_rows).values(
            message_id=message.msg_id, order_no=data["order"], amount=data["amount"]))


async def send_orders_async(box: Any, first: int, count: int, concurrency: int,
                            ids: dict[int, str]) -> None:
    """``count`` async producer transactions from ``concurrency`` coroutines."""
    from postbox import outbox
    async def produce(share: range) -> None:
        for i in share:
            order_no = first + i
            async with box.async_session.begin() as session:
                await session.execute(insert(orders).values(order_row(order_no)))
                ids[order_no] = await outbox.send(session, TOPIC, body_of(order_no))

    await asyncio.gather(*(produce(range(i, count, concurrency)) for i in range(concurrency)))


def async_pipeline(args: argparse.Namespace, target: Target, redis_url: str,
                   root: Path) -> dict:
    """One async pipeline measurement (module docstring)."""
    from bench.outbox_bench import confirmed_at_least, delete_marks, stub_summary, wait_for
    from postbox.framework import App, ConsumerOptions
    from postbox.outbox import Outbox, create_async_database_engine, database_engine

    target.reset()
    group = f"bench-async-{uuid.uuid4().hex[:8]}"
    store = Path(tempfile.mkdtemp(prefix="store-", dir=root))
    app = App(store_url=store, database_url=target.url, redis_url=redis_url,
              consumer_options=ConsumerOptions())
    loop = asyncio.new_event_loop()
    async_engine = create_async_database_engine(target.url)
    box = Outbox(app, engine=database_engine(app), async_engine=async_engine)
    register_async_bill(app, group)
    context = {"app": app, "box": box, "poll": create_engine(target.url), "group": group}
    count, warm, concurrency = args.messages, args.warmup, args.producer_threads
    try:
        app.start()
        ids: dict[int, str] = {}
        if warm:
            loop.run_until_complete(send_orders_async(box, 0, warm, concurrency, ids))
            wait_for(confirmed_at_least(context, warm), args.timeout, "async warm-up",
                     lambda: stub_summary(context))
        hook_before = box.relay.stats.published_by_hook
        cpu, start = cpu_s(), time.perf_counter()
        loop.run_until_complete(send_orders_async(box, warm, count, concurrency, ids))
        produced = time.perf_counter()
        done = wait_for(confirmed_at_least(context, warm + count), args.timeout,
                        "async pipeline", lambda: stub_summary(context))
        cpu = cpu_s() - cpu
        ledger_count = count_rows(context["poll"], ledger_rows)
        if ledger_count != warm + count:
            raise BenchError(f"{target.name}: async ledger holds {ledger_count} rows after "
                             f"{warm + count} messages (exactly-once broken)")
        return {"seconds": done - start, "producer_s": produced - start, "cpu_s": cpu,
                "published_by_hook": box.relay.stats.published_by_hook - hook_before}
    finally:
        try:
            app.stop()
        finally:
            loop.run_until_complete(async_engine.dispose())
            loop.close()
            context["poll"].dispose()
            delete_marks(redis_url, group)
            shutil.rmtree(store, ignore_errors=True)


def async_figures(reps: list[dict], count: int) -> dict[str, float]:
    """The async figures (medians over ``reps``) and their ratios to the sync pipeline."""
    def med(part: str, key: str) -> float:
        return statistics.median(rep[part][key] for rep in reps)

    sync_s, async_s = med("pipeline", "seconds"), med("async_pipeline", "seconds")
    sync_producer_s = med("pipeline", "producer_s")
    async_producer_s = med("async_pipeline", "producer_s")
    return {"async_pipeline_per_s": count / async_s,
            "async_producer_per_s": count / async_producer_s,
            "async_cpu_ms": med("async_pipeline", "cpu_s") / count * 1e3,
            "async_vs_sync": sync_s / async_s,
            "async_producer_vs_sync": sync_producer_s / async_producer_s}


def render_async(figures: dict, last: dict) -> None:
    """The async rows of the table, under the sync pipeline's."""
    if "async_pipeline_per_s" not in figures:
        return
    print(f"  {'async pipeline (AsyncSession, async def)':<40} "
          f"{figures['async_pipeline_per_s']:>9,.0f}   {figures['async_cpu_ms']:8.2f}")
    print(f"  {'  its producer transactions alone':<40} "
          f"{figures['async_producer_per_s']:>9,.0f}")
    print(f"  {'ratio async / sync pipeline':<40} {figures['async_vs_sync']:>9.2f}   "
          f"(producer side {figures['async_producer_vs_sync']:.2f}; relay by hook "
          f"{last['published_by_hook']:,})")


__all__ = ["async_figures", "async_pipeline", "register_async_bill", "render_async",
           "send_orders_async"]
