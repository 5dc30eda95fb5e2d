"""``postbox broker start --console``: the console served by the broker's own process, over
its live store (reads and writes through the running broker, no second opening)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from postbox.network.remoting.client.remote_broker import RemotingBroker
from postbox.storage_engine import Message
from tests.support.broker_process import START_TIMEOUT_S, BrokerProcess

TOKEN = "beside-the-broker"


def test_the_broker_serves_the_console_over_its_live_store(tmp_path: Path) -> None:
    server = BrokerProcess(tmp_path / "store", extra=(
        "--console", "127.0.0.1:0", "--console-write-token", TOKEN)).start()
    try:
        line = server._lines.get(timeout=START_TIMEOUT_S)
        assert line.startswith("console listening on "), line
        url = f"http://{line.split()[-1]}"
        with RemotingBroker(server.namesrv_address) as remote:
            remote.create_topic("live", 2)
            remote.send(Message("live", b'{"n": 1}', keys=["k-1"]), queue_id=1)
        with httpx.Client(base_url=url, timeout=60) as client:
            topics = client.get("/topics").text
            assert 'data-topic="live"' in topics and "source-error" not in topics
            found = client.get("/messages?by=key&topic=live&q=k-1").text
            assert "message-link" in found
            csrf = re.search(r'name="csrf" content="([0-9a-f]+)"',
                             client.get("/").text).group(1)
            assert client.post("/login", data={"csrf": csrf, "token": TOKEN, "name": "ops"},
                               follow_redirects=False).status_code == 303
            made = client.post("/topics/create", data={"csrf": csrf, "topic": "made-live",
                                                       "queues": "2", "source": "store"},
                               follow_redirects=False)
            assert "done=" in made.headers["location"], made.headers["location"]
        with RemotingBroker(server.namesrv_address) as remote:
            assert remote.topic_config("made-live") is not None
    finally:
        assert server.stop() == 0
