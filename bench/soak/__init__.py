"""The chaos soak: the whole topology under a seeded schedule of overlapping faults.

``python -m bench.soak --profile ci --seed 1`` (``--pair`` for a SYNC_MASTER + slave pair)
runs, over ``rocketmq://`` to a ``postbox broker start`` process (SYNC_FLUSH), a PostgreSQL
cluster and a Redis of its own (``scripts/services.sh --port … --data …``, so they can be
restarted without touching the shared ones):

- 2 producer processes (``roles.produce``): an order row and its ``outbox.send`` stub in one
  transaction, at a steady offered rate; they never publish;
- 2 relay processes (``roles.relay``): an ``Outbox`` relay polling the stubs and an
  ``OutboxWorker`` applying the resend rule;
- 3 consumer processes in 2 groups (``roles.consume``): ``soak-ledger`` (two processes, a sync
  ``idempotent=True`` handler) and ``soak-shipping`` (one process, an ``async def``
  ``idempotent=True`` handler), each writing one ``soak_effects`` row per order it handles.

``faults`` draws the schedule from the seed: ``kill -9`` of a random producer, relay,
consumer or broker every few seconds (restarted after), Redis and PostgreSQL restarts, one
broker stop longer than the relay's retry horizon, one full disk on the broker (its store is on
a small tmpfs, which needs root, and a filler file takes the tmpfs past
``diskMaxUsedSpaceRatio``; without root the disk fault is left out and the result says so).
``checks`` then drains the pipeline and checks the business tables directly and through
``postbox reconcile``: every committed order has exactly one effect per group, none is missing,
none applied twice, no stub ``void``; ``figures`` prints offered and achieved throughput, the
longest commit → handled delay and the time to recover from each kind of fault. ``run.soak``
does it all; ``tests/soak/test_soak.py`` runs the ``ci`` profile.
"""
