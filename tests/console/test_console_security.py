"""Who may change what through the console, and what bad input and broken sources look like.

A real console process each (``postbox console``), asked over HTTP: without a write token every
write is refused; a POST without the session's CSRF token is refused even with the write role;
listening beyond loopback without a token is refused at start; a wrong store or database shows
as that source's error while the others keep working; bad search input is a message."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.console.scenario import ROOT, console_process

WRITE_PATHS = ("/topics/create", "/groups/billing/reset", "/dlq/billing/requeue",
               "/outbox/rearm", "/outbox/void")
TOKEN = "security-test-token"


def csrf_of(client: httpx.Client, path: str = "/") -> str:
    page = client.get(path)
    assert page.status_code == 200
    match = re.search(r'name="csrf" content="([0-9a-f]+)"', page.text)
    assert match, page.text[:500]
    return match.group(1)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one topic (made through the command line's own store opening)."""
    from postbox.storage_engine import Broker, Message, StoreConfig

    root = tmp_path_factory.mktemp("console-store")
    with Broker.open(StoreConfig(root_dir=root)) as broker:
        broker.create_topic("orders", 2)
        broker.send(Message("orders", b'{"order": 1}', keys=["order-1"]))
    return root


@pytest.fixture(scope="module")
def read_only_url(store_dir: Path) -> Iterator[str]:
    """A console over the store without a write token."""
    with console_process(["--store", str(store_dir)]) as url:
        yield url


def test_without_a_token_every_write_is_refused(store_dir: Path, read_only_url: str) -> None:
    with httpx.Client(base_url=read_only_url) as client:
        csrf = csrf_of(client)
        assert "read-only" in client.get("/").text
        for path in WRITE_PATHS:
            answer = client.post(path, data={"csrf": csrf, "topic": "x", "queues": "1",
                                             "time": "0", "all": "1", "id": "x",
                                             "reason": "r"}, follow_redirects=False)
            assert answer.status_code == 403, path
            assert "read-only" in answer.text
        login = client.post("/login", data={"csrf": csrf, "token": "anything"})
        assert login.status_code == 403
        assert not topic_configured(store_dir, "x")


def test_a_post_without_the_csrf_token_is_refused(store_dir: Path) -> None:
    with console_process(["--store", str(store_dir), "--write-token", TOKEN]) as url, \
            httpx.Client(base_url=url) as client:
        csrf = csrf_of(client)
        assert client.post("/login", data={"token": TOKEN}).status_code == 403  # no CSRF
        signed = client.post("/login", data={"csrf": csrf, "token": TOKEN, "name": "bob"},
                             follow_redirects=False)
        assert signed.status_code == 303
        for path in WRITE_PATHS:
            assert client.post(path, data={"topic": "y"}).status_code == 403, path
            assert client.post(path, data={"topic": "y", "csrf": "0" * 64}
                               ).status_code == 403, path
        other_origin = client.post("/topics/create", data={"csrf": csrf, "topic": "y"},
                                   headers={"Origin": "http://evil.example"})
        assert other_origin.status_code == 403
        made = client.post("/topics/create", data={"csrf": csrf, "topic": "made",
                                                   "queues": "2", "source": "store"},
                           follow_redirects=False)
        assert made.status_code == 303 and "done=" in made.headers["location"]
        assert topic_configured(store_dir, "made")
        assert not topic_configured(store_dir, "y")


def test_listening_beyond_loopback_needs_a_token(store_dir: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "postbox", "console", "--listen",
                             "0.0.0.0:0", "--store", str(store_dir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_broken_source_shows_as_its_error_and_the_rest_works(store_dir: Path,
                                                                tmp_path: Path) -> None:
    with console_process(["--store", str(tmp_path / "no-store"), "--db",
                          f"sqlite:///{tmp_path / 'missing.db'}", "--redis-url",
                          "redis://127.0.0.1:6379/9", "--broker", "rocketmq://127.0.0.1:1",
                          "--reports", str(tmp_path / "no-reports")]) as url:
        overview = httpx.get(url + "/", timeout=60).text
        assert 'data-source="store"' in overview and "not a store" in overview
        assert "no database at" in overview
        assert 'class="error source-error" data-source="broker"' in overview
        assert "version" in overview  # redis answers
        for path in ("/topics", "/groups", "/dlq", "/outbox", "/reports",
                     "/messages?by=id&q=abc", "/message?source=store&topic=t&queue=0&offset=0"):
            answer = httpx.get(url + path, timeout=60)
            assert answer.status_code == 200, path
            assert "source-error" in answer.text and "Traceback" not in answer.text, path


def test_bad_search_input_is_a_message(read_only_url: str) -> None:
    url = read_only_url
    if url:
        for query, message in (("by=offset&topic=orders&queue=x&offset=0",
                                "queue must be a whole number"),
                               ("by=key&q=k", "give topic"),
                               ("by=nonsense&topic=orders", "unknown search"),
                               ("by=time&topic=orders&begin=1&end=", "give end"),
                               ("by=time&topic=orders&begin=yesterday&end=1", "not a time")):
            answer = httpx.get(f"{url}/messages?{query}", timeout=60)
            assert answer.status_code == 200
            assert message in answer.text, query
        found = httpx.get(f"{url}/messages?by=key&topic=orders&q=order-1", timeout=60).text
        assert "message-link" in found


def topic_configured(store_dir: Path, topic: str) -> bool:
    from postbox.cli.common import StoreOptions, open_broker

    with open_broker(StoreOptions(store_dir)) as broker:
        return broker.topic_config(topic) is not None
