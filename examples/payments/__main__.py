"""``python -m examples.payments place --count N [--fault lose|flaky|poison]`` places orders
(stubs only: a running Celery worker's ``relay_pending`` publishes them);
``python -m examples.payments demo`` runs the embedded scenario (as ``postbox demo``) in a
fresh temporary directory.

Configuration from the environment, as the Celery app reads it (``PaymentsConfig.from_env``).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from sqlalchemy.orm import Session

from postbox.outbox.database import create_database_engine

from .app import prepare_database
from .config import PaymentsConfig
from .faults import FLAKY, LOSE, POISON
from .orders import place_order
from .scenario import run_scenario


def main(argv: list[str] | None = None) -> int:
    """Run the example's command line; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m examples.payments")
    commands = parser.add_subparsers(dest="command", required=True)
    place = commands.add_parser("place", help="place orders (order row + outbox stub)")
    place.add_argument("--count", type=int, default=10)
    place.add_argument("--fault", choices=(LOSE, FLAKY, POISON))
    commands.add_parser("demo", help="run the embedded end-to-end scenario")
    args = parser.parse_args(argv)
    if args.command == "demo":  # in a fresh temporary directory, kept for a look afterwards
        directory = Path(tempfile.mkdtemp(prefix="postbox-payments-"))
        report = run_scenario(PaymentsConfig(
            store_dir=directory / "store",
            database_url=f"sqlite:///{directory / 'payments.db'}"))
        print(f"store and database in {directory}")
        for check in report.checks:
            print(f"{'ok  ' if check.passed else 'FAIL'} {check.name}: {check.detail}")
        return 0 if report.passed else 1
    config = PaymentsConfig.from_env()
    prepare_database(config)
    engine = create_database_engine(config.database_url)
    chooser = random.Random()
    try:
        for number in range(args.count):
            with Session(engine) as session, session.begin():
                order_id, message_id = place_order(session, f"customer-{number}",
                                                   chooser.randrange(100, 100_000),
                                                   fault=args.fault)
            print(f"order {order_id}: message {message_id}")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
