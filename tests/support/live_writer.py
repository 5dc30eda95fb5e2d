"""A broker writing a store continuously, in its own process (the subject of the live-inspection
tests: ``postbox`` inspection commands run against the store while this writes it).

Run from the repository root::

    python -m tests.support.live_writer --root DIR

It opens ``Broker.open`` on ``--root`` (8 KiB commit-log segments, 64-unit queue files,
127-entry index files: every kind of file rolls within seconds), then, forever: sends message
``i`` to ``orders`` (key ``order-i``), commits group ``billing``'s offset on the queue it went
to, dead-letters every 10th message for ``billing`` (reason ``bad-i``), and persists the config
tables every 20 messages. After each message it prints ``sent i UNIQ_KEY OFFSET_MSG_ID`` on
stdout (flushed). A line ``stop`` on stdin makes it finish the current message, close the broker
cleanly and print ``closed``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import uuid
from pathlib import Path

from postbox.storage_engine import (
    Broker,
    CommitLogConfig,
    ConsumeQueueConfig,
    KeyIndexConfig,
    Message,
    StoreConfig,
)

SEGMENT_SIZE_BYTES = 8192
GROUP = "billing"
TOPIC = "orders"


def live_config(root: Path) -> StoreConfig:
    """The writer's configuration (inspections pass ``--segment-size 8192``; the rest is in the
    store's layout file)."""
    return StoreConfig(root_dir=root,
                       commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES),
                       consume_queue=ConsumeQueueConfig(units_per_file=64),
                       key_index=KeyIndexConfig(slot_count_max=64, entry_count_max=127))


def say(line: str) -> None:
    """One line on stdout, flushed (the parent reads it at once)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    broker = Broker.open(live_config(args.root))
    try:
        broker.create_topic(TOPIC, 2)
        index = 0
        while not stop.is_set():
            receipt = broker.send(Message(topic=TOPIC, body=f"order {index}".encode(),
                                          keys=[f"order-{index}"],
                                          unique_key=uuid.uuid4().hex.upper()))
            broker.commit_offset(GROUP, TOPIC, receipt.queue_id, receipt.queue_offset + 1)
            if index % 10 == 0:
                view = broker.store.read_message(receipt.log_position)
                broker.send_back(GROUP, view, delay_level=-1, reason=f"bad-{index}")
            if index % 20 == 0:
                broker.tables.persist_all()
            say(f"sent {index} {receipt.unique_key} {receipt.offset_msg_id}")
            index += 1
    finally:
        broker.close()
    say("closed")


if __name__ == "__main__":
    main()
