"""``RemotingBroker`` (producer and admin side) against a Postbox broker served over remoting.

Every answer is compared with what the embedded ``Broker`` underneath says for the same call:
the remote transport must be the same broker seen through a socket (same results, same
``MessageView`` fields), with the namespace invisible to the application.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from postbox.broker_node.access import RemotingAccess
from postbox.framework import App
from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Broker, Message
from postbox.storage_engine.errors import InvalidMessageError, NoPermissionError
from tests.support.postbox_remoting import PostboxRemoting, serve_remoting
from tests.support.small_store import small_store_config


@pytest.fixture
def postbox(tmp_path: Path) -> Iterator[PostboxRemoting]:
    with Broker.open(small_store_config(tmp_path / "store")) as broker, \
            serve_remoting(broker) as served:
        yield served


@pytest.fixture
def client(postbox: PostboxRemoting) -> Iterator[RemotingBroker]:
    remote = RemotingBroker(postbox.namesrv, namespace="team1")
    yield remote
    remote.close()


def test_sends_land_in_the_store_as_embedded_sends_do(postbox, client) -> None:
    client.create_topic("orders", 4)
    assert postbox.broker.topic_config("team1%orders").read_queue_nums == 4
    assert client.topic_config("orders").write_queue_nums == 4
    assert client.queue_ids("orders") == [0, 1, 2, 3]
    result = client.send(Message("orders", b"one", tags="TagA", keys=["k1"],
                                 properties={"region": "eu"}), queue_id=1)
    postbox.broker.store.wait_dispatched()
    [embedded] = postbox.broker.find_by_unique_key("team1%orders", result.unique_key)
    [remote] = client.find_by_unique_key("orders", result.unique_key)
    expected = embedded.as_dict() | {"topic": "orders"}
    assert remote.as_dict() == expected
    assert (result.queue_id, result.queue_offset, result.log_position, result.offset_msg_id) == (
        1, embedded.queue_offset, embedded.log_position, embedded.msg_id)
    with pytest.raises(InvalidMessageError, match="queue id 4"):
        client.send(Message("orders", b"x"), queue_id=4)


def test_unknown_topics_are_created_on_first_send_like_embedded(postbox, client) -> None:
    result = client.send(Message("fresh", b"auto"))
    config = postbox.broker.topic_config("team1%fresh")
    assert config is not None and config.write_queue_nums == 8
    assert result.topic == "fresh" and 0 <= result.queue_id < 8
    assert client.queue_ids("fresh") == list(range(8))


def test_a_batch_lands_in_one_queue_as_the_embedded_batch_does(postbox, client) -> None:
    client.create_topic("orders", 4)
    messages = [Message("orders", f"m{index}".encode(), tags="TagA", keys=[f"k{index}"])
                for index in range(5)]
    results = client.send_batch(messages, queue_id=2)
    postbox.broker.store.wait_dispatched()
    assert [result.queue_offset for result in results] == [0, 1, 2, 3, 4]
    for result in results:
        [embedded] = postbox.broker.find_by_unique_key("team1%orders", result.unique_key)
        assert (embedded.queue_id, embedded.queue_offset, embedded.msg_id) == (
            2, result.queue_offset, result.offset_msg_id)
    assert postbox.broker.store.commit_log.max_position > 0

    before = postbox.broker.store.commit_log.max_position
    refusals = [
        ([Message("orders", b"a"), Message("refunds", b"b")], "one topic"),
        ([Message("orders", b"a"), Message("orders", b"b", properties={"DELAY": "2"})],
         "delayed"),
        ([Message("orders", b"x" * (3 << 20)), Message("orders", b"y" * (2 << 20))],
         "over the 4,194,304-byte limit"),
        ([], "at least one message"),
    ]
    for batch, error in refusals:
        with pytest.raises(InvalidMessageError, match=error):
            client.send_batch(batch)
    assert postbox.broker.store.commit_log.max_position == before  # nothing was sent


def test_concurrent_sends_through_one_app_all_arrive_once(postbox) -> None:
    app = App(store_url=f"rocketmq://{postbox.namesrv}?namespace=load")
    try:
        producer = app.producer
        producer.send("bulk", b"warm-up")

        def burst(thread: int) -> list[str]:
            return [producer.send("bulk", f"{thread}-{i}".encode()).msg_id for i in range(200)]
        with ThreadPoolExecutor(4) as pool:
            ids = [msg_id for batch in pool.map(burst, range(4)) for msg_id in batch]
    finally:
        app.stop()
    store = postbox.broker
    store.store.wait_dispatched()
    stored = [view for queue_id in store.queue_ids("load%bulk")
              for view in store.pull("check", "load%bulk", queue_id, 0, 1024).messages]
    assert len(stored) == 801 and len(set(ids)) == 800
    assert {view.unique_key for view in stored} >= set(ids)


def test_groups_progress_and_dead_letters_match_the_embedded_broker(postbox, client) -> None:
    broker = postbox.broker
    client.create_topic("orders", 2)
    config = client.subscription_group("billing")
    assert config.group_name == "billing"
    assert broker.tables.subscription_groups.get("team1%billing") is not None
    assert client.consumer_groups() == ["billing"]
    sent = [client.send(Message("orders", f"m{i}".encode()), queue_id=i % 2) for i in range(4)]
    broker.store.wait_dispatched()
    broker.commit_offset("team1%billing", "team1%orders", 0, 1)
    progress = {(row.topic, row.queue_id): row for row in client.consumer_progress("billing")}
    assert progress[("orders", 0)].committed_offset == 1
    assert progress[("orders", 0)].max_offset == 2
    assert client.dead_letters("billing") == []
    view = broker.pull("team1%billing", "team1%orders", 1, 0, 1).messages[0]
    broker.send_back("team1%billing", view, delay_level=-1)
    broker.store.wait_dispatched()
    [dead] = client.dead_letters("billing")
    assert dead.topic == "%DLQ%billing" and dead.unique_key == sent[1].unique_key
    assert client.dead_letters("billing", offset=1) == []
    assert broker.query_offset("team1%billing", "%DLQ%team1%billing", 0) is None


ACL = {"accounts": [
    {"access_key": "orders-app", "secret_key": "s3cret", "topics": {"orders": "PUB|SUB"}},
    {"access_key": "ops", "secret_key": "ops-secret", "admin": True},
]}


def test_credentials_sign_every_request_of_an_app(tmp_path: Path) -> None:
    (tmp_path / "acl.json").write_text(json.dumps(ACL))
    with Broker.open(small_store_config(tmp_path / "store")) as broker:
        broker.create_topic("orders", 2)
        access = RemotingAccess.load(tmp_path / "acl.json",
                                     lambda topic: broker.topic_config(topic) is not None)
        with serve_remoting(broker, access) as served:
            app = App(store_url=served.store_url, access_key="orders-app", secret_key="s3cret")
            try:
                assert app.producer.send("orders", b"signed").status.value == "PUT_OK"
            finally:
                app.stop()
            for credentials in ({"access_key": "orders-app", "secret_key": "wrong"}, {}):
                client = RemotingBroker(served.namesrv, **credentials)
                try:
                    with pytest.raises(NoPermissionError):
                        client.send(Message("orders", b"refused"))
                finally:
                    client.close()
            ops = RemotingBroker(served.namesrv, access_key="ops", secret_key="ops-secret")
            try:
                assert ops.topic_config("orders").read_queue_nums == 2
            finally:
                ops.close()
        broker.store.wait_dispatched()
        assert [view.body for view in broker.pull("g", "orders", 0, 0, 8).messages
                + broker.pull("g", "orders", 1, 0, 8).messages] == [b"signed"]
