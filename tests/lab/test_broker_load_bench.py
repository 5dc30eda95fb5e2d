"""``bench.broker_load_bench``'s short profile against both brokers: the official Java client's
sync, async and transactional senders (``TransactionMQProducer``, each local transaction
committing) with a concurrent push consumer, the broker's CPU read over the measured window,
and every message sent (committed) consumed by the end."""

from __future__ import annotations

import pytest

from bench import broker_load_bench as bench

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

LOADS = ("sync-100", "async-100", "tx-100")


def test_short_load_against_apache_and_postbox(rocketmq_install, tmp_path, capsys) -> None:
    args = bench.parse_args(["--quick", "--sizes", "100", "--threads", "8", "--in-flight", "32",
                             "--window-s", "1.5", "--drain-s", "60", "--dir", str(tmp_path)])
    report = bench.run(args)

    assert report["failures"] == {}
    for name in ("java", "postbox"):
        assert set(report["results"][name]) == set(LOADS)
        for load in LOADS:
            figures = report["results"][name][load]
            assert figures["sent_in_window"] > 0, (name, figures)
            # a broker may shed a send under the CI's other lanes (Apache's "broker busy"); the
            # client counts it, never as sent
            assert figures["failed"] <= figures["sent"] // 100, (name, figures)
            assert figures["backlog_after_drain"] <= 0, (name, load, figures)  # all consumed
            assert figures["consumed"] >= figures["sent"]
            assert figures["cpu_us_per_message"] > 0, (name, figures)
            assert 0 < figures["cpu_cores"] <= 2.5  # the broker's CPU over the window
    assert set(report["ratios"]) == set(LOADS)
    bench.render(report)
    out = capsys.readouterr().out
    assert "postbox / java sync-100: send" in out and "CPU per message" in out
    assert set(report["transactions"]["100"]) == {"java", "postbox", "postbox_over_java"}
    assert "transactional ratio (tx / sync sends per second), 100 B: java" in out
