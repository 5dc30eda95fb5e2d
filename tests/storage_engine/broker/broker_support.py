"""Helpers for the ``Broker`` tests: brokers on real store directories, verified after use.

``BrokerFactory`` opens brokers (``Broker.open``, so each owns its store) on a small store
configuration and, at exit, closes them in reverse order and requires ``verify_store`` to find
no problem, as the ``open_store`` fixture does for plain stores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from postbox.storage_engine import Broker, BrokerConfig, FakeClock, StoreConfig, verify_store
from tests.storage_engine.conftest import small_config

WAIT_S = 5.0  # generous bound for "happens soon" conditions; tests finish far sooner


def broker_config(root: Path, **broker_fields) -> StoreConfig:
    """A small store configuration (64 KiB segments) with ``BrokerConfig(**broker_fields)``."""
    return small_config(root, tiny=False, broker=BrokerConfig(**broker_fields))


class BrokerFactory:
    """Opens brokers and closes plus verifies them all at exit."""

    def __init__(self, root: Path, clock: FakeClock) -> None:
        self.root = root
        self.clock = clock
        self._opened: list[Broker] = []

    def open(self, name: str = "store", *, memory_bytes: int | None = None,
             config: StoreConfig | None = None, **broker_fields) -> Broker:
        """A broker that owns a store under ``root / name``."""
        store_config = config or broker_config(self.root / name, **broker_fields)
        broker = Broker.open(store_config, clock=self.clock, memory_bytes=memory_bytes)
        self._opened.append(broker)
        return broker

    def __enter__(self) -> BrokerFactory:
        return self

    def __exit__(self, *exc_info) -> None:
        for broker in reversed(self._opened):
            broker.close()
        for broker in self._opened:
            assert verify_store(broker.store.root_dir, broker.store.config) == []


class Background:
    """Run a callable on a thread; ``result()`` joins and returns (or re-raises)."""

    def __init__(self, target: Callable[[], object]) -> None:
        self._target = target
        self._value: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._target()
        except BaseException as error:  # handed to the test thread by result()
            self._error = error

    def result(self, timeout_s: float = WAIT_S) -> object:
        """The callable's return value (raises what it raised)."""
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "background call did not finish"
        if self._error is not None:
            raise self._error
        return self._value
