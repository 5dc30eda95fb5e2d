"""A message's rows in a run's ``classification.csv``, found by a byte search read in chunks of
whole lines (whatever the chunk size, the same rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from postbox.console import pages_messages


@pytest.mark.parametrize("chunk_bytes", [1, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("last_newline", ["", "\n"])
def test_report_rows_are_the_same_whatever_the_chunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int,
        last_newline: str) -> None:
    monkeypatch.setattr(pages_messages, "SEARCH_CHUNK_BYTES", chunk_bytes)
    (tmp_path / "classification.csv").write_text(
        "message_id,classification,detail\nA1,lost,\nB2,confirmed,has A1 in it\n"
        "A1,in_flight,\nC3,exhausted,x" + last_newline)
    assert pages_messages.report_rows(tmp_path, "A1") == [
        {"message_id": "A1", "classification": "lost", "detail": ""},
        {"message_id": "A1", "classification": "in_flight", "detail": ""}]
    assert pages_messages.report_rows(tmp_path, "C3") == [
        {"message_id": "C3", "classification": "exhausted", "detail": "x"}]
    assert pages_messages.report_rows(tmp_path, "D4") == []
