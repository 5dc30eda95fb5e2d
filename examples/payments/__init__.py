"""The payments example: an order service and a billing consumer, exactly once.

- ``orders.place_order`` writes an order row and its ``orders`` message stub in one database
  transaction (``outbox.send``); the relay publishes the stub after the commit.
- ``billing.register_billing`` adds the billing consumer: an ``idempotent=True`` handler that
  writes one ledger row per order in the transaction that confirms the stub.
- ``faults.FaultInjector`` makes the failures the framework exists for happen on purpose:
  messages lost between relay and consumer, handlers that fail once or always.
- ``app.build_app`` / ``app.build_worker`` assemble it from a ``PaymentsConfig``;
  ``celery_app`` runs the periodic outbox tasks under Celery; ``scenario.run_scenario`` is the
  whole story end to end (``postbox demo``).

Run it embedded: ``postbox demo`` (or ``python -m examples.payments``). With Celery::

    export POSTBOX_STORE=.postbox/payments-store POSTBOX_DATABASE_URL=sqlite:///.postbox/payments.db
    celery -A examples.payments.celery_app worker --loglevel=info
    celery -A examples.payments.celery_app beat --loglevel=info
    python -m examples.payments place --count 100
"""
