"""What the remoting peer tests share: topics created through ``mqadmin`` on a target, and
messages compared with what was sent (``tests/lab/test_remoting_peers.py``,
``tests/lab/test_go_client_peer.py``)."""

from __future__ import annotations

import base64

from tests.support.mqadmin import MqadminError
from tests.support.remoting_targets import RemotingTarget

QUEUES = 4
UPDATE_ATTEMPTS = 3


def create_topics(target: RemotingTarget, *topics: str) -> None:
    """``mqadmin updateTopic`` on the target's broker, then wait until the name server routes
    each topic. The update is asked again (it is idempotent) when mqadmin's own 3 s ran out
    waiting for the broker's answer: once in CI, a just-started Apache broker beside eight
    other lanes took longer (``RemotingTimeoutException``), a refusal still fails at once."""
    commands = [["updateTopic", "-b", target.broker_addr, "-t", topic,
                 "-r", str(QUEUES), "-w", str(QUEUES)] for topic in topics]
    for attempt in range(1, UPDATE_ATTEMPTS + 1):
        try:
            target.mqadmin.run(*commands)
            break
        except MqadminError as error:
            if attempt == UPDATE_ATTEMPTS or "RemotingTimeoutException" not in str(error):
                raise
    routes = target.driver.run("await-route", topics=list(topics), timeout_ms=60_000)
    assert routes == {topic: [target.broker_name] for topic in topics}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def body_of(message: dict) -> bytes:
    return base64.b64decode(message["body_b64"])


def assert_same_message(delivered: dict, spec: dict) -> None:
    """Body, tags, keys and user properties as sent (system properties may be added)."""
    sent_body = base64.b64decode(spec["body_b64"]) if "body_b64" in spec else \
        spec["body"].encode()
    assert body_of(delivered) == sent_body
    assert delivered["tags"] == spec.get("tags")
    assert delivered["keys"] == (" ".join(spec["keys"]) if "keys" in spec else None)
    for name, value in spec.get("properties", {}).items():
        assert delivered["properties"][name] == value, name
