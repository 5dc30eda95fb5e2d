"""A broker process for the replication tests: one store with a role, driven over stdin/stdout.

Run from the repository root::

    python -m tests.storage_engine.ha.replication_process --root DIR --role SYNC_MASTER \\
        --ha-listen 127.0.0.1:0
    python -m tests.storage_engine.ha.replication_process --root DIR --role SLAVE \\
        --master 127.0.0.1:PORT

It opens ``Broker.open(replication_config(...))`` (small segments, queues and index files) and
prints one JSON line ``{"event": "ready", "ha_listen": ..., "max_position": ...}``. Then each
line on stdin is one command, answered on stdout by JSON lines (flushed at once):

- ``put N PREFIX [BODY_BYTES] [TOPIC]``: N sends to queue ``i % 4`` with key ``PREFIX-i``; one
  line per put as it returns (``{"event": "put", "i", "key", "position", "queue_offset",
  "queue_id", "status", "elapsed_ms"}``), then ``{"event": "put_done"}``. A test may kill the
  process while the lines stream: a line read means its put had returned with that status.
- ``delay TOPIC LEVEL KEY``: one send with the ``DELAY`` property → ``{"event": "put", ...}``.
- ``status`` → ``{"event": "status", **store.ha_status(), "dispatch_position", "topics"}``.
- ``wait_dispatched POSITION TIMEOUT_MS`` → ``{"event": "waited", "ok": bool}`` once dispatch
  reached POSITION (consume queues and key index built), or after the timeout.
- ``read POSITION`` → ``{"event": "read", ...record fields...}`` (or ``{"event": "error"}``).
- ``pull TOPIC QUEUE_ID OFFSET MAX`` → ``{"event": "pull", "status", "messages": [...]}``.
- ``query_key TOPIC KEY`` → ``{"event": "query", "positions": [...]}``.
- ``close`` → closes the broker, prints ``{"event": "closed"}`` and exits 0.

Errors of a command are answered with ``{"event": "error", "type", "message"}``; the process
goes on. ``ReplicationProcess`` is the parent's handle on such a process.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from postbox.storage_engine import (
    Broker,
    BrokerRole,
    CommitLogConfig,
    ConsumeQueueConfig,
    DelayConfig,
    FlushConfig,
    FlushMode,
    HAConfig,
    KeyIndexConfig,
    Message,
    MessageView,
    StorageError,
    StoreConfig,
)
from postbox.storage_engine.formats import PROPERTY_DELAY
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_until

QUEUE_COUNT = 4
SEGMENT_SIZE_BYTES = 32 * 1024
READY_TIMEOUT_S = 30


def replication_config(root: Path, role: BrokerRole, *, ha_listen: str | None = None,
                       master: str | None = None, slave_timeout_ms: int = 3_000,
                       flush: FlushMode = FlushMode.ASYNC,
                       segment_size_bytes: int = SEGMENT_SIZE_BYTES,
                       transfer_batch_bytes: int = 32 * 1024,
                       delay_levels_ms: tuple[int, ...] = (200, 400)) -> StoreConfig:
    """Small files so segments, queue files and index files roll within a test."""
    return StoreConfig(
        root_dir=root, broker_role=role,
        commit_log=CommitLogConfig(segment_size_bytes=segment_size_bytes),
        consume_queue=ConsumeQueueConfig(units_per_file=64),
        key_index=KeyIndexConfig(slot_count_max=256, entry_count_max=512),
        flush=FlushConfig(mode=flush, interval_ms=50, consume_queue_interval_ms=100),
        delay=DelayConfig(levels_ms=delay_levels_ms),
        ha=HAConfig(ha_listen=ha_listen, master_address=master,
                    slave_timeout_ms=slave_timeout_ms,
                    transfer_batch_bytes=transfer_batch_bytes))


def body_for(key: str, size: int) -> bytes:
    """The deterministic body of the message with ``key``."""
    return (key.encode() + b":").ljust(size, b".")


def view_json(view: MessageView) -> dict:
    """The fields of a record the tests compare."""
    return {"topic": view.topic, "queue_id": view.queue_id, "queue_offset": view.queue_offset,
            "position": view.log_position, "store_size": view.store_size,
            "keys": view.keys, "body": view.body.decode("latin-1"),
            "store_timestamp_ms": view.store_timestamp_ms,
            "properties": dict(view.properties)}


# ---- the child process ---------------------------------------------------------------------


class Driver:
    """Executes commands against one broker."""

    def __init__(self, broker: Broker, out: IO[str]) -> None:
        self.broker = broker
        self.store = broker.store
        self.out = out

    def emit(self, **fields) -> None:
        self.out.write(json.dumps(fields) + "\n")
        self.out.flush()

    def run(self, line: str) -> bool:
        """Execute one command; False after ``close``."""
        name, *args = line.split()
        try:
            return getattr(self, f"do_{name}")(*args) is not False
        except StorageError as error:
            self.emit(event="error", type=type(error).__name__, message=str(error))
            return True

    def do_put(self, count: str, prefix: str, body_bytes: str = "100",
               topic: str = "orders") -> None:
        for i in range(int(count)):
            key = f"{prefix}-{i}"
            message = Message(topic, body_for(key, int(body_bytes)), keys=[key])
            started = time.monotonic()
            receipt = self.broker.send(message, queue_id=i % QUEUE_COUNT)
            self.emit(event="put", i=i, key=key, position=receipt.log_position,
                      queue_offset=receipt.queue_offset, queue_id=receipt.stored_queue_id,
                      topic=receipt.stored_topic, status=receipt.status.value,
                      elapsed_ms=(time.monotonic() - started) * 1000)
        self.emit(event="put_done")

    def do_delay(self, topic: str, level: str, key: str) -> None:
        receipt = self.broker.send(Message(topic, body_for(key, 50), keys=[key],
                                           properties={PROPERTY_DELAY: level}), queue_id=0)
        self.emit(event="put", key=key, position=receipt.log_position,
                  queue_offset=receipt.queue_offset, queue_id=receipt.stored_queue_id,
                  topic=receipt.stored_topic, status=receipt.status.value)

    def do_status(self) -> None:
        self.emit(event="status", **self.store.ha_status(),
                  dispatch_position=self.store.dispatch.position, topics=self.store.topics(),
                  delay_service_running=self.broker.delay_service.is_running)

    def do_wait_dispatched(self, position: str, timeout_ms: str) -> None:
        wait_until(lambda: self.store.dispatch.position >= int(position), int(timeout_ms) / 1000,
                   interval_s=0.005, fail=False)
        self.emit(event="waited", ok=self.store.dispatch.position >= int(position))

    def do_read(self, position: str) -> None:
        self.emit(event="read", **view_json(self.store.read_message(int(position))))

    def do_pull(self, topic: str, queue_id: str, offset: str, max_count: str) -> None:
        result = self.broker.pull("replication-test", topic, int(queue_id), int(offset),
                                  int(max_count))
        self.emit(event="pull", status=result.status.value, next_offset=result.next_offset,
                  messages=[view_json(view) for view in result.messages])

    def do_query_key(self, topic: str, key: str) -> None:
        views = self.store.query_by_key(topic, key)
        self.emit(event="query", positions=[view.log_position for view in views])

    def do_close(self) -> bool:
        self.broker.close()
        self.emit(event="closed")
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.storage_engine.ha.replication_process")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--role", choices=[role.value for role in BrokerRole], required=True)
    parser.add_argument("--ha-listen")
    parser.add_argument("--master")
    parser.add_argument("--slave-timeout-ms", type=int, default=3_000)
    parser.add_argument("--flush", choices=["SYNC", "ASYNC"], default="ASYNC")
    parser.add_argument("--segment-size", type=int, default=SEGMENT_SIZE_BYTES)
    args = parser.parse_args(argv)
    config = replication_config(args.root, BrokerRole(args.role), ha_listen=args.ha_listen,
                                master=args.master, slave_timeout_ms=args.slave_timeout_ms,
                                flush=FlushMode[args.flush],
                                segment_size_bytes=args.segment_size)
    broker = Broker.open(config)
    driver = Driver(broker, sys.stdout)
    address = broker.store.ha_listen_address
    driver.emit(event="ready", ha_listen=None if address is None else f"{address[0]}:{address[1]}",
                max_position=broker.store.commit_log.max_position)
    for line in sys.stdin:
        if line.strip() and not driver.run(line):
            return 0
    broker.close()  # stdin closed: the parent went away
    return 0


# ---- the parent's handle -------------------------------------------------------------------


class ReplicationProcess:
    """A running ``replication_process`` child."""

    def __init__(self, root: Path, role: BrokerRole, *extra: str) -> None:
        self.root = root
        self.role = role
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.storage_engine.ha.replication_process", "--root",
             str(root), "--role", role.value, *extra],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        ready = self.read_line(READY_TIMEOUT_S)
        assert ready["event"] == "ready", ready
        self.ha_listen: str | None = ready["ha_listen"]
        self.start_position: int = ready["max_position"]

    @classmethod
    def master(cls, root: Path, *, sync: bool = True, **options: str) -> ReplicationProcess:
        """A master listening on a free loopback port."""
        role = BrokerRole.SYNC_MASTER if sync else BrokerRole.ASYNC_MASTER
        return cls(root, role, "--ha-listen", "127.0.0.1:0", *_flags(options))

    @classmethod
    def slave(cls, root: Path, master_address: str, **options: str) -> ReplicationProcess:
        """A slave of ``master_address``."""
        return cls(root, BrokerRole.SLAVE, "--master", master_address, *_flags(options))

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output: the child exited

    def read_line(self, timeout_s: float = 30) -> dict:
        """The next JSON line (the child answers every command; a dead child fails here)."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"{self.role.value} process: no answer within {timeout_s} s"
                                 ) from None
        if not line:
            raise AssertionError(f"{self.role.value} process exited "
                                 f"(status {self.process.poll()}) without answering")
        return json.loads(line)

    def send(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def command(self, command: str, timeout_s: float = 30) -> dict:
        """Send a one-line command and return its one-line answer."""
        self.send(command)
        return self.read_line(timeout_s)

    def put(self, count: int, prefix: str, body_bytes: int = 100,
            topic: str = "orders") -> list[dict]:
        """``count`` puts; their results in order."""
        self.send(f"put {count} {prefix} {body_bytes} {topic}")
        results = []
        while (line := self.read_line())["event"] == "put":
            results.append(line)
        assert line["event"] == "put_done", line
        return results

    def status(self) -> dict:
        return self.command("status")

    def wait_for(self, predicate, timeout_s: float = 20, what: str = "condition") -> dict:
        """Poll ``status`` until ``predicate(status)``; the last status."""
        last: list[dict] = []

        def holds() -> dict | None:
            last[:] = [self.status()]
            return last[0] if predicate(last[0]) else None

        return wait_until(holds, timeout_s, what, interval_s=0.02, detail=lambda: last[0])

    def close(self) -> None:
        """Clean shutdown (``close`` command) and wait for the exit."""
        if self.process.poll() is None:
            assert self.command("close")["event"] == "closed"
            assert self.process.wait(30) == 0
        self.process.stdin.close()

    def kill(self) -> None:
        """SIGKILL, no clean-up of any kind."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.process.stdin.close()


def _flags(options: dict[str, str]) -> list[str]:
    flags: list[str] = []
    for name, value in options.items():
        flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


if __name__ == "__main__":
    sys.exit(main())
