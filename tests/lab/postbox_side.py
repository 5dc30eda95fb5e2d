"""The Postbox side of the lab's client tests: a ``postbox broker start`` process the official
clients talk to, and the driver's gRPC consumers run against any endpoint.

- ``PostboxEndpoint`` starts ``postbox broker start`` on a fresh store (subscription groups set
  up first through an embedded ``Broker``), on a loopback port; ``close()`` stops it with
  SIGTERM and checks exit code 0 and a clean ``verify_store``.
- ``BROKER_CONF``: small files, and RocketMQ's *default* delay levels, so that retry back-off
  and delayed delivery run with the same figures as the Apache broker's gRPC consumers.
- ``Deliveries`` reads a ``grpc-simple`` / ``grpc-push`` report (``GrpcConsumers.java``):
  deliveries by body, attempt sequences, gaps between attempts.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from postbox.storage_engine import Broker, StoreConfig, SubscriptionGroupConfig, verify_store
from tests.support.broker_process import BrokerProcess

BROKER_CONF = """\
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=20000
maxHashSlotNum=1024
maxIndexNum=4096
messageDelayLevel=1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h
"""


@dataclass
class PostboxEndpoint:
    """One ``postbox broker start`` process on a fresh store under ``directory``."""

    directory: Path
    retry_max_times: dict[str, int] = field(default_factory=dict)
    orderly: frozenset[str] = frozenset()
    """Groups that consume orderly (``consumeMessageOrderly``: FIFO pop consumption)."""
    process: BrokerProcess | None = None

    def start(self) -> PostboxEndpoint:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "broker.conf"
        conf.write_text(BROKER_CONF)
        store = self.directory / "store"
        with Broker.open(self.config()) as broker:
            for group, times in self.retry_max_times.items():
                extra = {"consumeMessageOrderly": True} if group in self.orderly else {}
                broker.tables.subscription_groups.put(
                    SubscriptionGroupConfig(group, retry_max_times=times, extra=extra))
        self.process = BrokerProcess(store, broker_conf=conf).start()
        return self

    def config(self) -> StoreConfig:
        return StoreConfig.from_broker_conf(self.directory / "broker.conf",
                                            root_dir=self.directory / "store")

    @property
    def address(self) -> str:
        assert self.process is not None
        return self.process.address

    def close(self) -> None:
        """SIGTERM; the server must exit 0 and leave a store ``verify_store`` finds clean."""
        if self.process is None:
            return
        code = self.process.stop()
        assert code == 0, self.process.stderr_text()
        assert verify_store(self.process.store, self.config()) == []


@dataclass
class Deliveries:
    """One consumer's report: every delivery in arrival order."""

    report: dict

    @property
    def all(self) -> list[dict]:
        return self.report["deliveries"]

    @property
    def sent_ids(self) -> list[str]:
        return self.report["sent"]

    def by_body(self) -> dict[str, list[dict]]:
        grouped: dict[str, list[dict]] = defaultdict(list)
        for delivery in self.all:
            grouped[delivery["body"]].append(delivery)
        return dict(grouped)

    def attempts(self) -> dict[str, list[int]]:
        """Body -> the delivery attempts seen, in arrival order."""
        return {body: [d["delivery_attempt"] for d in seen]
                for body, seen in self.by_body().items()}

    def gaps_ms(self, body: str) -> list[int]:
        """Milliseconds between successive deliveries of ``body``."""
        times = [d["at_ms"] for d in self.by_body().get(body, [])]
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    def corrupted(self) -> list[str]:
        return [d["body"] for d in self.all if d["corrupted"]]
