"""``verify_store`` and the checkpoint's confirm position.

Postbox writes the commit log's flushed position there; RocketMQ 4.x has no such field (zeros)
and RocketMQ 5.3.3 sets it only in controller or duplication mode, so a Java slave's store
(tests/lab/test_replication_across.py) carries 0 after a clean stop. Zero therefore reads as
"not recorded"; any other value that is not the log end after a clean close is still a problem.
"""

from __future__ import annotations

from postbox.storage_engine import Message, MessageStore, verify_store
from postbox.storage_engine.formats import decode_checkpoint, encode_checkpoint
from tests.storage_engine.conftest import put_all, small_config

TOPIC = "orders"


def _closed_store(tmp_path):
    config = small_config(tmp_path / "store", tiny=False)
    store = MessageStore.open(config)
    put_all(store, [Message(TOPIC, b"one"), Message(TOPIC, b"two")])
    store.close()
    return config


def _set_confirm_position(config, position: int) -> int:
    path = config.root_dir / "checkpoint"
    state = decode_checkpoint(path.read_bytes())
    path.write_bytes(encode_checkpoint(state._replace(confirm_position=position)))
    return state.confirm_position


def test_a_checkpoint_without_a_confirm_position_is_clean(tmp_path):
    config = _closed_store(tmp_path)
    end = _set_confirm_position(config, 0)  # as RocketMQ 4.x, or a 5.3.3 slave, leaves it
    assert end > 0
    assert verify_store(config.root_dir, config) == []


def test_a_confirm_position_short_of_the_end_after_a_clean_close_is_reported(tmp_path):
    config = _closed_store(tmp_path)
    end = decode_checkpoint((config.root_dir / "checkpoint").read_bytes()).confirm_position
    _set_confirm_position(config, end - 1)
    assert verify_store(config.root_dir, config) == [
        f"checkpoint: confirm position {end - 1} != log end {end} after a clean close"]
