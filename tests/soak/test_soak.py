"""The chaos soak's ``ci`` profile (``bench.soak``): 3 minutes of overlapping faults on the whole
topology — producers, relays and consumers in processes of their own, a ``postbox broker``
over ``rocketmq://``, PostgreSQL and Redis — then the end checks: every committed order has
exactly one effect in each consumer group, no stub is left ``void``, and ``postbox reconcile``
finds every stub confirmed. Marker ``soak`` (``make test-soak``; CI runs it in a lane of its
own). It starts a PostgreSQL cluster and a Redis of its own (``scripts/services.sh --port …
--data …``) and mounts a tmpfs for the broker's store, so it runs as root in CI, where the
full-disk fault must be played."""

from __future__ import annotations

import json
import logging

import pytest

from bench.soak.report import describe
from bench.soak.run import soak
from bench.soak.tables import GROUPS
from tests.support.ci_policy import ci_forbids_skips

log = logging.getLogger(__name__)
pytestmark = [pytest.mark.soak, pytest.mark.timeout(3000)]


@pytest.mark.parametrize(("seed", "pair"), [(11, False)], ids=["sync-flush"])
def test_the_ci_profile_loses_nothing_and_applies_nothing_twice(tmp_path, seed, pair):
    result = soak("ci", seed, tmp_path / "soak", pair=pair)
    (tmp_path / "soak.txt").write_text(describe(result))  # the figures, kept with the run
    log.warning("%s", describe(result))
    checks = result["checks"]
    assert result["drained"], result["last_state"]
    for group, found in checks["groups"].items():
        assert (found["missing_count"], found["twice_count"], found["strays"]) == (0, 0, 0), \
            (group, found)
    assert set(checks["stubs"]) == {"confirmed"}, checks["stubs"]
    assert checks["orders_without_stub"] == checks["stubs_without_order"] == 0
    assert checks["orders"] > 0 and result["figures"]["faults_played"] > 10
    reconcile = result["reconcile"]
    assert reconcile["exit_code"] == 0, reconcile
    assert reconcile["counts"]["confirmed"] == checks["orders"] * len(GROUPS), reconcile
    assert not {name: count for name, count in reconcile["counts"].items()
                if name != "confirmed" and count}, reconcile
    if ci_forbids_skips():
        assert result["disk_fault"] == "tmpfs", "CI must play the full-disk fault (run as root)"
    assert result["passed"], json.dumps(result, default=str)[:5000]
