"""The store out of file descriptors for a while (``EMFILE`` on the checkpoint's ``open``, as
under a flood of connections): the queue-flush service retries on its next interval instead of
putting the store into fail-stop, the old checkpoint stays what recovery reads, and once
descriptors are back the checkpoint is written and writes go on. A failure that is not a
shortage still stops the store."""

from __future__ import annotations

import errno
import os
import threading

from postbox.storage_engine import FlushConfig, Message
from postbox.storage_engine.service import out_of_descriptors
from tests.storage_engine.conftest import put_all, small_config
from tests.support.polling import wait_until


def _failing_checkpoint_open(monkeypatch, error_number: int) -> tuple[threading.Event, list]:
    """``os.open`` of the checkpoint fails with ``error_number`` while the event is set."""
    real_open, failing, attempts = os.open, threading.Event(), []
    failing.set()

    def fake_open(path, *args, **kwargs):
        if failing.is_set() and os.fspath(path).endswith(os.sep + "checkpoint"):
            attempts.append(path)
            raise OSError(error_number, os.strerror(error_number), os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    return failing, attempts


def _store(open_store, tmp_path):
    config = small_config(tmp_path / "store", flush=FlushConfig(
        interval_ms=20, least_pages=0, consume_queue_interval_ms=20,
        consume_queue_least_pages=0, consume_queue_thorough_interval_ms=20))
    return open_store(config)  # real clock: the service threads run their intervals


def test_a_checkpoint_write_out_of_descriptors_is_retried_not_fail_stop(
        open_store, tmp_path, monkeypatch):
    store = _store(open_store, tmp_path)
    before = store.checkpoint.path.read_bytes()
    failing, attempts = _failing_checkpoint_open(monkeypatch, errno.EMFILE)
    put_all(store, [Message("T", b"first")])  # the checkpoint changes: a write is due
    wait_until(lambda: len(attempts) >= 3, 10, "the checkpoint write retried")
    assert store.failure is None and store.queue_flusher.failure is None
    assert store.queue_flusher.descriptor_shortages >= 3
    assert store.checkpoint.path.read_bytes() == before  # the old one, for recovery
    put_all(store, [Message("T", b"during")])  # writes go on
    failing.clear()
    wait_until(lambda: store.checkpoint.path.read_bytes() != before, 10, "checkpoint written")
    put_all(store, [Message("T", b"after")])
    assert store.failure is None


def test_another_checkpoint_write_error_still_stops_the_store(open_store, tmp_path,
                                                              monkeypatch):
    store = _store(open_store, tmp_path)
    _failing, attempts = _failing_checkpoint_open(monkeypatch, errno.EIO)
    put_all(store, [Message("T", b"first")])
    wait_until(lambda: store.failure is not None, 10, "fail-stop")
    assert len(attempts) == 1 and not out_of_descriptors(store.failure)
    monkeypatch.undo()  # the store closes after the test (left for recovery)
