"""A small store and outbox database written directly (no framework), with several segments:
``orders`` messages with stubs, some of them dead-lettered in ``%DLQ%billing``, and a consumer
offset past them all. Lets the bad-input tests damage one file and know what the rest holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, insert

from postbox.outbox.tables import message_stub, metadata
from postbox.storage_engine import Message, MessageStore
from postbox.storage_engine.formats import encode_config_json
from tests.storage_engine.conftest import small_config

TOPIC = "orders"
GROUP = "billing"
SEGMENT_SIZE_BYTES = 8192


@dataclass
class SmallStore:
    """Where things went."""

    root: Path
    database_url: str
    segments_with_dead_letters: set[int] = field(default_factory=set)
    dead_lettered: list[str] = field(default_factory=list)
    confirmed: int = 0


def build_small_store(base: Path, messages: int = 120) -> SmallStore:
    """Write the store and the database under ``base``: every 10th message of the first and
    last 20 is dead-lettered, so the segments in the middle hold none."""
    built = SmallStore(base / "store", f"sqlite:///{base / 'app.db'}")
    engine = create_engine(built.database_url)
    metadata.create_all(engine)
    now = datetime(2026, 1, 1, 12)
    rows = []
    with MessageStore.open(small_config(built.root, segment_size_bytes=SEGMENT_SIZE_BYTES)
                           ) as store:
        for number in range(messages):
            message_id = f"ID{number:030d}"
            put = store.put_message(Message(TOPIC, b"x" * 100, unique_key=message_id))
            dead = number % 10 == 0 and not 20 <= number < messages - 20
            if dead:
                letter = store.put_message(Message(
                    f"%DLQ%{GROUP}", b"x" * 100, unique_key=message_id,
                    properties={"RETRY_TOPIC": TOPIC, "DLQ_REASON": "declined"}))
                built.dead_lettered.append(message_id)
                built.segments_with_dead_letters.add(letter.log_position // SEGMENT_SIZE_BYTES)
            else:
                built.confirmed += 1
            rows.append({"message_id": message_id, "topic": TOPIC, "content": b"x",
                         "status": "unconfirmed" if dead else "confirmed", "send_count": 1,
                         "queue_id": 0, "queue_offset": put.queue_offset,
                         "log_position": put.log_position, "published_at": now,
                         "created_at": now + timedelta(minutes=number),
                         "updated_at": now, "confirmed_at": None if dead else now})
    with engine.begin() as connection:
        connection.execute(insert(message_stub), rows)
    engine.dispose()
    offsets = built.root / "config" / "consumerOffset.json"
    offsets.parent.mkdir(exist_ok=True)  # the broker's directory; a store alone makes none
    offsets.write_text(encode_config_json({"offsetTable": {f"{TOPIC}@{GROUP}": {0: messages}}}))
    return built


def segment_files(root: Path) -> list[Path]:
    """The commit-log segments, in order."""
    return sorted((root / "commitlog").iterdir())


__all__ = ["GROUP", "SEGMENT_SIZE_BYTES", "TOPIC", "SmallStore", "build_small_store",
           "segment_files"]
