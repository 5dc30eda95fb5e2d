"""What ``postbox console`` serves and where: the sources, the listening address, the token.

Loopback by default. Listening on any other address needs a write token (``--write-token`` or
``POSTBOX_CONSOLE_WRITE_TOKEN``): a console reachable from elsewhere without one would show the
store and the database to anyone who can reach the port. ``ConsoleConfigError`` says so.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:8088"
REFRESH_S_DEFAULT = 5.0


class ConsoleConfigError(Exception):
    """A console setting that cannot work (bad address, non-loopback without a token)."""


@dataclasses.dataclass(frozen=True)
class ConsoleSettings:
    """Everything the console was given; a source left None is not shown."""

    host: str = "127.0.0.1"
    port: int = 8088
    store_dir: Path | None = None
    broker_conf: Path | None = None
    segment_size_bytes: int | None = None
    broker_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    database_url: str | None = None
    redis_url: str | None = None
    reports_dir: Path | None = None
    write_token: str | None = None
    refresh_s: float = REFRESH_S_DEFAULT

    @property
    def writable(self) -> bool:
        """Whether write actions exist at all (a token is configured)."""
        return bool(self.write_token)

    def sources(self) -> list[str]:
        """The names of the sources given, in the order the pages show them."""
        given = {"store": self.store_dir or self.broker_conf, "broker": self.broker_url,
                 "database": self.database_url, "redis": self.redis_url,
                 "reports": self.reports_dir}
        return [name for name, value in given.items() if value]


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8088`` for IPv6) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConsoleConfigError(f"--listen takes HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_settings(settings: ConsoleSettings) -> None:
    """Refuse what cannot work: no source at all, or a non-loopback address without a token."""
    if not settings.sources():
        raise ConsoleConfigError("give at least one source: --store, --broker, "
                                 "--database-url, --redis-url or --reports")
    if not is_loopback(settings.host) and not settings.write_token:
        raise ConsoleConfigError(
            f"refusing to listen on {settings.host}: beyond loopback the console needs a "
            "write token (--write-token or POSTBOX_CONSOLE_WRITE_TOKEN); or listen on "
            "127.0.0.1")
