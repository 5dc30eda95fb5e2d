"""One test suite, three transports (a pytest plugin, loaded by ``tests/conftest.py``).

``--transport embedded|postbox|rocketmq`` (default: ``POSTBOX_TEST_TRANSPORT``, else
``embedded``) chooses what the framework's suites (``SUITES``) run their apps against:

- ``embedded``: an embedded broker on a small store under the test's ``tmp_path`` (as always).
- ``postbox``: one ``postbox broker start`` process for the session (``BrokerProcess``: a store
  under the session's temp dir, name server and broker on free loopback ports, here with the
  consumer tests' broker.conf and millisecond delay levels), reached through
  ``rocketmq://127.0.0.1:PORT``; stopped (SIGTERM, exit code 0) when the session ends.
- ``rocketmq``: the compatibility lab's live Apache RocketMQ (``live_rocketmq``), reached
  through ``rocketmq://`` to its name server.

Fixture ``store`` (function scope) is what the suites' app-building fixtures ask for:
``store.remote``, ``store.url(name)`` (embedded: the directory ``tmp_path / name``; remote: the
session broker's URL with a namespace of this test's own, so tests sharing one broker see only
their own topics, groups and offsets) and ``store.app_options(name, broker_conf=...)`` (the
keyword arguments of ``App``: an embedded store gets its broker.conf keys, a remote broker is
configured where it runs).

Selection: a remote run keeps the tests of ``SUITES`` that use ``store`` and deselects the rest
with the reason counted in the terminal summary — tests of other packages, tests that use no
store (they would run the same code again), tests that inspect or configure the embedded broker
(fixtures ``EMBEDDED_FIXTURES``) and tests marked ``@pytest.mark.embedded_only("reason")``.
``open_broker`` (tests/support/brokers.py) hands remote runs a client of the remote broker
instead of an embedded one.
The embedded run deselects ``@pytest.mark.remote_only("reason")`` tests (several processes on
one broker). Deselected, not skipped: under ``CI=true`` a skip fails the run.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from postbox.storage_engine.config import parse_delay_levels
from tests.support.broker_process import BrokerProcess
from tests.support.consumer_process import BROKER_CONF
from tests.support.idempotent_consumer import MS_DELAY_LEVELS
from tests.support.rocketmq_processes import LAB_BROKER_SETTINGS

TRANSPORTS = ("embedded", "postbox", "rocketmq")
ENV = "POSTBOX_TEST_TRANSPORT"
SUITES = ("tests/framework/", "tests/outbox/", "tests/idempotency/", "tests/examples/")
EMBEDDED_FIXTURES = {
    "fake_clock": "drives the broker's clock",
    "store_clock": "drives the broker's clock",
    "tight_app": "sets the store's maximum message size",
}
"""Fixtures that tie a test to the embedded broker, with the reason shown when deselected."""
NAMESPACE_STEM_MAX = 24
"""A namespace is at most 64 characters: this stem, a digest, a clock suffix and the store's
name (``store``, ``closed-store``, ...) fit."""
_REASONS = pytest.StashKey[Counter]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--transport", choices=TRANSPORTS, default=None,
                     help=f"what the framework suites' apps run against (default: ${ENV}, "
                          "else embedded)")


def transport_of(config: pytest.Config) -> str:
    """The transport of this run."""
    chosen = config.getoption("--transport") or os.environ.get(ENV) or "embedded"
    if chosen not in TRANSPORTS:
        raise pytest.UsageError(f"{ENV}={chosen!r}: one of {', '.join(TRANSPORTS)}")
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "embedded_only(reason): about the embedded store itself; "
                                       "deselected in the remote-transport runs")
    config.addinivalue_line("markers", "remote_only(reason): needs a broker in another process; "
                                       "deselected in the embedded run")


def remote_exclusion(item: pytest.Item) -> str | None:
    """Why a remote run leaves ``item`` out, or None when it runs it."""
    path = item.nodeid.replace(os.sep, "/")
    if not path.startswith(SUITES):
        return "not a framework suite"
    marker = item.get_closest_marker("embedded_only")
    if marker is not None:
        return f"embedded only: {marker.args[0] if marker.args else 'no reason given'}"
    names = set(getattr(item, "fixturenames", ()))
    for fixture, reason in EMBEDDED_FIXTURES.items():
        if fixture in names:
            return reason
    if "store" not in names:
        return "uses no store (runs in the embedded pass)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    transport = transport_of(config)
    reasons: Counter = Counter()
    keep, drop = [], []
    for item in items:
        if transport == "embedded":
            marker = item.get_closest_marker("remote_only")
            reason = None if marker is None else f"remote only: {marker.args[0]}"
        else:
            reason = remote_exclusion(item)
        if reason is None:
            keep.append(item)
        else:
            drop.append(item)
            reasons[reason.split(":")[0]] += 1  # a marker's own reason is in the test
    config.stash[_REASONS] = reasons
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    reasons = config.stash.get(_REASONS, Counter())
    if transport_of(config) == "embedded" and not reasons:
        return
    terminalreporter.write_line(f"transport: {transport_of(config)}; deselected: "
                                + (", ".join(f"{count} {reason}" for reason, count in
                                             reasons.most_common()) or "none"))


# ---- the session's remote broker ---------------------------------------------------------------


@pytest.fixture(scope="session")
def postbox_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``postbox broker start`` for the session; its name server's ``host:port``."""
    folder = tmp_path_factory.mktemp("postbox-broker")
    conf = folder / "broker.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in
                            {**BROKER_CONF, "messageDelayLevel": MS_DELAY_LEVELS}.items()))
    process = BrokerProcess(folder / "store", broker_conf=conf).start()  # free ports
    try:
        yield process.namesrv_address
    finally:
        assert process.stop() == 0, process.stderr_text()


@pytest.fixture(scope="session")
def remote_namesrv(request: pytest.FixtureRequest) -> str | None:
    """The name server of this run's remote broker (None for the embedded run)."""
    transport = transport_of(request.config)
    if transport == "postbox":
        return request.getfixturevalue("postbox_namesrv")
    if transport == "rocketmq":
        return request.getfixturevalue("live_rocketmq").namesrv
    return None


@dataclass(frozen=True)
class StoreUnderTest:
    """Where one test's apps keep their messages."""

    transport: str
    directory: Path
    namesrv: str | None
    namespace: str

    @property
    def remote(self) -> bool:
        return self.namesrv is not None

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """The broker's delay table (``messageDelayLevel``): level n waits entry n - 1.
        Embedded: ``open_broker``'s default."""
        table = LAB_BROKER_SETTINGS["messageDelayLevel"] if self.transport == "rocketmq" \
            else MS_DELAY_LEVELS
        return parse_delay_levels(table)

    def url(self, name: str = "store") -> str:
        """The store URL of ``name`` (a directory, or a namespace on the remote broker)."""
        if self.namesrv is None:
            return str(self.directory / name)
        return f"rocketmq://{self.namesrv}?namespace={self.namespace}-{name}"

    def app_options(self, name: str = "store", *, broker_conf: Any = None) -> dict[str, Any]:
        """``App`` keyword arguments for the store ``name``."""
        if self.namesrv is None:
            return {"store_url": self.url(name), "broker_conf": broker_conf}
        return {"store_url": self.url(name)}


def namespace_for(nodeid: str) -> str:
    """A namespace of one test: readable, unique per test id, in RocketMQ's name alphabet."""
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    stem = re.sub(r"[^A-Za-z0-9_-]", "-", nodeid.rsplit("::", 1)[-1])[:NAMESPACE_STEM_MAX]
    return f"{stem}-{digest}-{time.time_ns() % 1_000_000:06d}"


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path,
          remote_namesrv: str | None) -> StoreUnderTest:
    """Where this test's apps keep their messages (see the module docstring)."""
    return StoreUnderTest(transport_of(request.config), tmp_path, remote_namesrv,
                          namespace_for(request.node.nodeid))
