"""The hostile-peers benchmark's quick profile against this tree's broker, for two attacks (a
frame-level and a request-level one), so that it keeps working: every attack runs, the
listeners survive, the well-behaved client is served throughout, and the hardening's figures
come out (every frame answered, no route taken)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import hostile_peers_bench


def test_quick_profile_runs_two_attacks(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = hostile_peers_bench.main(["--quick", "--json", "--dir", str(tmp_path), "--only",
                                     "lone-surrogates,route-hijack"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0, document
    results = {result["attack"]: result for result in document["attacks"]}
    assert list(results) == ["lone-surrogates", "route-hijack"]
    for result in results.values():
        assert result["alive"] is True and result["process_up"] is True, result
        assert result["good_sends_ok"] == result["good_sends"] > 0, result
        assert result["new_clients_served"] == "10/10", result
        assert result["memory_capped"] is False
    assert results["lone-surrogates"]["listener_killed_by"] == "none"
    assert results["lone-surrogates"]["frames_answered"].startswith("12/12")
    assert results["route-hijack"]["registrations_accepted"] == 0
    assert results["route-hijack"]["hijacked_addresses"] == 0
    assert list(tmp_path.iterdir()) == []  # the bench removed its stores
