"""``postbox store repair`` (issue 19 item 1): a store refused for mid-log corruption opens
again after the command, with every valid message in place; the damage is named by ``verify``
and by the refusal, and kept under ``DIR/damaged/``."""

from __future__ import annotations

from postbox.storage_engine import CommitLogConfig, Message, MessageStore, StoreConfig
from tests.cli.cli_support import SEGMENT_SIZE_BYTES, assert_one_error_line, run, run_json


def _damaged_store(root):
    config = StoreConfig(root_dir=root,
                         commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))
    with MessageStore.open(config) as store:
        results = store.put_messages([Message("orders", b"m%04d" % i + bytes(100))
                                      for i in range(300)])
        assert store.wait_dispatched()
    segment = sorted((root / "commitlog").iterdir())[-3]
    victim = next(r for r in results if r.log_position >= int(segment.name) + 1000)
    data = bytearray(segment.read_bytes())
    data[victim.log_position - int(segment.name) + 95] ^= 0x01
    segment.write_bytes(bytes(data))
    return results, victim, segment


def test_repair_makes_a_refused_store_readable_and_keeps_the_damaged_bytes(tmp_path):
    root = tmp_path / "store"
    results, victim, segment = _damaged_store(root)
    args = ["--store", str(root), "--segment-size", str(SEGMENT_SIZE_BYTES)]

    refused = run("store", "stats", *args)
    assert_one_error_line(refused, segment.name, f"position={victim.log_position}",
                          "valid record(s) follow", f"postbox store repair --store {root}")
    verify = run_json("store", "verify", *args, expect_exit=1)
    assert any(f"commitlog/{segment.name} position={victim.log_position}: mid-log corruption"
               in problem for problem in verify["problems"]), verify

    report = run_json("store", "repair", *args)
    (item,) = report["set_aside"]
    assert (item["segment"], item["position"]) == (segment.name, victim.log_position)
    assert report["valid_records"] == len(results) - 1
    assert (root / "damaged" / item["bytes_file"]).stat().st_size == victim.store_size

    assert run_json("store", "verify", *args)["problems"] == []
    stats = run_json("store", "stats", *args)
    assert stats["commit_log"]["max_position"] == results[-1].log_position + \
        results[-1].store_size
    again = run("store", "repair", *args)
    assert again.exit_code == 0 and "nothing changed" in again.stdout


def test_repair_on_a_directory_that_is_not_a_store_says_so_and_creates_nothing(tmp_path):
    assert_one_error_line(run("store", "repair", "--store", str(tmp_path)), "not a store")
    assert list(tmp_path.iterdir()) == []
