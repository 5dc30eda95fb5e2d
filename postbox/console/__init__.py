"""``postbox console``: the operator's web console over a store, a broker, the outbox
database, a Redis and reconciliation reports (whichever are given).

An edge package beside ``postbox.cli``: it may import anything (it reuses the command line's
own queries, requeues, re-arms and offset resets) and nothing imports it; the ``console``
command loads it when run, so the rest of the command line works without the web stack
(``pip install 'postbox[web]'``). Pages: ``pages_*`` modules; plumbing: ``web``; who may write
and the audit: ``security``; charts: ``charts`` (server-side SVG).
"""

from __future__ import annotations

from .app import ConsoleThread, build_app, serve
from .settings import ConsoleConfigError, ConsoleSettings, check_settings, parse_listen

__all__ = ["ConsoleConfigError", "ConsoleSettings", "ConsoleThread", "build_app", "check_settings",
           "parse_listen", "serve"]
