"""Consume-queue files against the open-file limit: where writes stop, what a restart does, the
descriptors held, and what the LRU of open queue files costs in put/pull throughput.

Run ``python -m bench.open_files_bench limit`` or ``... speed`` (``--help`` lists the options).

* **limit**: a child process with ``RLIMIT_NOFILE`` at ``--limit`` (soft and hard) opens a store
  (1 MiB commit-log segments, ``--units`` units a queue file) and puts one message into queue
  after queue (``--queues`` at most), one consume-queue file each, waiting for dispatch every 50
  queues, until a put or the dispatch fails. It prints how many queue files were written, the
  error, and its open descriptors (``/proc/self/fd``) at the end. It is then killed with
  SIGKILL and a second child, under the same limit, reopens the store and reads every queue's
  message: "restart ok" or its error.
* **speed**: in this process, ``--messages`` 100-byte messages round-robin over ``--queues``
  queues (``put_message``, ASYNC flush, until dispatched), then every queue pulled back
  (``get_message``, 32 at a time), once per ``--open-files-max`` value: with a cap at or above
  the queue count nothing is ever closed; a smaller cap reopens files all the time.

Figures are printed, never asserted. Runs against whatever ``storage_engine`` is on the path,
so the same script measures an older tree (where ``open_files_max`` does not exist, the
``speed`` mode runs once, with every file open).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from postbox.storage_engine import (
    CommitLogConfig,
    ConsumeQueueConfig,
    GetStatus,
    KeyIndexConfig,
    Message,
    MessageStore,
    StoreConfig,
)

QUEUE_IDS_PER_TOPIC = 1000
DISPATCH_CHECK_EVERY = 50


def store_config(root: Path, units: int, open_files_max: int | None = None) -> StoreConfig:
    """Small files; ``open_files_max`` only where the store knows the setting."""
    queue_options: dict[str, int] = {"units_per_file": units}
    if open_files_max is not None:
        queue_options["open_files_max"] = open_files_max
    return StoreConfig(root_dir=root, commit_log=CommitLogConfig(segment_size_bytes=1 << 20),
                       consume_queue=ConsumeQueueConfig(**queue_options),
                       key_index=KeyIndexConfig(enabled=False))


def queue_of(number: int) -> tuple[str, int]:
    return f"Q{number // QUEUE_IDS_PER_TOPIC:04d}", number % QUEUE_IDS_PER_TOPIC


def open_descriptors() -> int | str:
    try:
        return len(os.listdir("/proc/self/fd")) - 1
    except OSError as error:  # EMFILE: not even the listing fits
        return f"all ({error.strerror})"


def child_write(root: Path, queues: int, units: int) -> None:
    """Put one message per queue until something fails; report, then wait for SIGKILL."""
    written, error = 0, ""
    try:
        store = MessageStore.open(store_config(root, units))
        for number in range(queues):
            topic, queue_id = queue_of(number)
            store.put_message(Message(topic=topic, body=f"m{number}".encode()), queue_id)
            if (number + 1) % DISPATCH_CHECK_EVERY == 0:
                store.wait_dispatched(30_000)
                if store.failure is not None:
                    raise store.failure
            written = number + 1
        store.wait_dispatched(30_000)
        if store.failure is not None:
            raise store.failure
    except Exception as failure:  # the figure is where and how writes stopped
        error = f"{type(failure).__name__}: {failure}"[:300]
    print(json.dumps({"queues_written": written, "error": error,
                      "open_descriptors": open_descriptors()}), flush=True)
    time.sleep(3600)


def child_restart(root: Path, queues: int, units: int) -> None:
    """Reopen after the kill and read every queue's message."""
    try:
        with MessageStore.open(store_config(root, units)) as store:
            missing = 0
            for number in range(queues):
                topic, queue_id = queue_of(number)
                result = store.get_message("G", topic, queue_id, 0, 1)
                if result.status is not GetStatus.FOUND:
                    missing += 1
            report = {"restart": "ok", "queues_read": queues - missing, "missing": missing,
                      "open_descriptors": open_descriptors()}
    except Exception as failure:
        report = {"restart": f"{type(failure).__name__}: {failure}"[:300]}
    print(json.dumps(report), flush=True)


def run_child(mode: str, root: Path, args: argparse.Namespace, *, kill: bool) -> dict:
    limit = args.limit
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.open_files_bench", f"child-{mode}", "--root", str(root),
         "--queues", str(args.queues), "--units", str(args.units)],
        stdout=subprocess.PIPE, text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    assert process.stdout is not None
    line = process.stdout.readline()
    if kill:
        process.send_signal(signal.SIGKILL)
    process.wait()
    return json.loads(line) if line else {"error": f"child exited {process.returncode}"}


def limit_mode(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="open-files-bench-"))
    try:
        written = run_child("write", root / "store", args, kill=True)
        print(f"RLIMIT_NOFILE {args.limit}: {written.get('queues_written')} of {args.queues} "
              f"queue files written; open descriptors {written.get('open_descriptors')}; "
              f"stopped by: {written.get('error') or '-'}")
        restarted = run_child("restart", root / "store", args, kill=False)
        print(f"restart under the same limit: {restarted}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def speed_once(args: argparse.Namespace, open_files_max: int | None) -> str:
    root = Path(tempfile.mkdtemp(prefix="open-files-speed-"))
    try:
        config = store_config(root, args.units, open_files_max)
        messages = [(Message(topic=queue_of(n % args.queues)[0], body=bytes(100)),
                     queue_of(n % args.queues)[1]) for n in range(args.messages)]
        with MessageStore.open(config) as store:
            started = time.perf_counter()
            for message, queue_id in messages:
                store.put_message(message, queue_id)
            store.wait_dispatched(120_000)
            put_s = time.perf_counter() - started
            started = time.perf_counter()
            read = 0
            for number in range(min(args.queues, args.messages)):
                topic, queue_id = queue_of(number)
                offset = 0
                while True:
                    result = store.get_message("G", topic, queue_id, offset, 32)
                    if result.status is not GetStatus.FOUND:
                        break
                    read += len(result.messages)
                    offset = result.next_offset
            pull_s = time.perf_counter() - started
            opened = getattr(getattr(store, "open_files", None), "opened_count", "-")
        assert read == args.messages, (read, args.messages)
        return (f"open_files_max {open_files_max if open_files_max is not None else 'n/a'}: "
                f"put {args.messages / put_s:,.0f} msg/s, pull {read / pull_s:,.0f} msg/s, "
                f"files opened {opened}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def speed_mode(args: argparse.Namespace) -> None:
    supported = "open_files_max" in ConsumeQueueConfig.__dataclass_fields__
    caps = args.open_files_max if supported else [None]
    print(f"{args.messages} messages round-robin over {args.queues} queues")
    for cap in caps:
        print(speed_once(args, cap))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["limit", "speed", "child-write", "child-restart"])
    parser.add_argument("--limit", type=int, default=1024, help="RLIMIT_NOFILE of the child")
    parser.add_argument("--queues", type=int, default=2000)
    parser.add_argument("--units", type=int, default=1000, help="units per queue file")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--open-files-max", type=int, nargs="+", default=[4000, 64])
    parser.add_argument("--root", type=Path)
    args = parser.parse_args(argv)
    if args.mode == "child-write":
        child_write(args.root, args.queues, args.units)
    elif args.mode == "child-restart":
        child_restart(args.root, args.queues, args.units)
    elif args.mode == "limit":
        limit_mode(args)
    else:
        speed_mode(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
