"""Shared fixtures for framework tests: real brokers on small real stores.

``open_broker(name, clock=None, levels=MS_LEVELS, **fields)`` and ``fake_clock`` come from
``tests/support/brokers.py``: an embedded ``Broker`` on a small store under ``tmp_path``, closed
at teardown and then checked with ``verify_store`` — or, in a remote-transport run
(``--transport postbox|rocketmq``, ``tests/support/transports.py``), a client of the run's remote
broker; tests that configure the broker or read its store are marked ``embedded_only``.

``client(broker)`` is what an app uses to reach ``broker``: the broker (or remote client) itself
(tests give apps ``App(broker=client(broker))`` and keep inspecting ``broker`` through the
``BrokerClient`` methods, or, embedded only, directly).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from postbox.framework import BrokerClient
from postbox.storage_engine import Broker


@pytest.fixture
def client() -> Callable[[Broker], BrokerClient]:
    """``client(broker)``: what an app uses to reach ``broker`` (the broker itself)."""
    return lambda broker: broker
