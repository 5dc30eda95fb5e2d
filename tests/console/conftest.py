"""The console's browser tests share one prepared scenario (package scope: the scenario and
Spark's reconciliation take a while), one browser, and a console process per module
(``console_url``: over every source of the scenario, with a write token; a module may
override it to point the console elsewhere); ``page`` is a fresh browser context on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.browsing import TOKEN
from tests.console.scenario import Prepared, console_process, prepare
from tests.support.filesystems import scratch_dir

CONSOLE_REDIS_URL = "redis://127.0.0.1:6379/9"


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


@pytest.fixture(scope="module")
def console_url(prepared: Prepared) -> Iterator[str]:
    """The console over every source, with a write token."""
    with console_process(["--store", str(prepared.store_dir), "--db", prepared.database_url,
                          "--redis-url", prepared.redis_url, "--reports",
                          str(prepared.reports_dir)],
                         env={"POSTBOX_CONSOLE_WRITE_TOKEN": TOKEN}) as url:
        yield url


@pytest.fixture
def page(browser, console_url: str):
    """A fresh browser context (its own cookies) on the console."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  base_url=console_url)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()
