"""Alembic migrations of the outbox tables (``outbox.tables``), shipped as a package.

``upgrade(url)``, ``downgrade(url)``, ``current(url)`` and ``head()`` run them from Python (see
``migrations.api``); ``postbox db …`` runs them from the command line. ``env.py``,
``script.py.mako`` and ``versions/`` form the Alembic script directory, found relative to this
package, so no ``alembic.ini`` is needed. This package imports only ``outbox.tables`` from the
project, and nothing but the CLI imports it.
"""

from __future__ import annotations

from .api import MigrationError, current, downgrade, head, make_config, upgrade

__all__ = ["MigrationError", "current", "downgrade", "head", "make_config", "upgrade"]
