"""The console's browser tests share one prepared scenario, one console process and one
browser (module scope: the scenario and Spark's reconciliation take a while)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.scenario import Prepared, prepare
from tests.support.filesystems import scratch_dir

CONSOLE_REDIS_URL = "redis://127.0.0.1:6379/9"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


@pytest.fixture(scope="package")
def prepared(tmp_path_factory: pytest.TempPathFactory, spark: object) -> Iterator[Prepared]:
    """The payments scenario's store, database and one reconciliation run."""
    import redis

    client = redis.Redis.from_url(CONSOLE_REDIS_URL)
    try:
        client.ping()
        client.flushdb()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"no Redis at {CONSOLE_REDIS_URL}")
    finally:
        client.close()
    with scratch_dir(tmp_path_factory, "console") as base:
        yield prepare(base, CONSOLE_REDIS_URL, spark)


@pytest.fixture(scope="package")
def browser() -> Iterator[object]:
    """Debian's Chromium driven by Playwright."""
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no /usr/bin/chromium")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                              args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()
