"""Every ``postbox.v1.Broker`` method checks the caller's rights on every topic and group it
reads or writes (issue 19, item 5), against a real ``postbox broker start --acl`` process.

Each operation is tried with keys that lack exactly one right (PUB or SUB on the topic, SUB on
the group, the create right) and must be refused with PERMISSION_DENIED; a key with every right
must get through. The issue's attack — a forged record pushed into ``%DLQ%billing`` by
send-back, then re-sent into ``orders`` — is reproduced byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from network.grpc_v2.auth import Credentials, signed_metadata
from network.grpc_v2.client import RemoteBroker
from network.grpc_v2.codec import encode_record, message_header
from network.grpc_v2.frame import pack, unpack
from network.grpc_v2.postbox_service import METHODS, SERVICE_NAME
from storage_engine import Broker, Message, StoreConfig
from tests.support.acl_keys import KEYS_LACKING_ONE_RIGHT
from tests.support.broker_process import BrokerProcess, write_broker_conf

KEYS = KEYS_LACKING_ONE_RIGHT
ACL = {"accounts": [
    {"access_key": "admin", "secret_key": "admin-secret", "admin": True},
    {"access_key": "mallory", "secret_key": "mallory-secret", "groups": {"billing": "SUB"}},
    *({"access_key": name, "secret_key": f"{name}-secret", **rights}
      for name, rights in KEYS.items()),
]}
LACKING = {"topic_pub": "no-topic-pub", "topic_sub": "no-topic-sub",
           "topic_any": "no-topic-right", "group_sub": "no-group", "create": "no-create"}
"""Which key lacks each right."""


def credentials(name: str) -> Credentials:
    return Credentials(name, f"{name}-secret")


def call(address: str, who: Credentials | None, method: str, header: dict,
         payload: bytes = b"") -> tuple[grpc.StatusCode, dict]:
    """One raw call; (OK, answer fields) or (the refusal's status code, {})."""
    metadata = None if who is None else signed_metadata(who, "raw-client")
    with grpc.insecure_channel(address) as channel:
        try:
            answer = channel.unary_unary(f"/{SERVICE_NAME}/{method}")(
                pack(header, payload), metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            return error.code(), {}
    return grpc.StatusCode.OK, unpack(answer)[0].values


@dataclass
class Secured:
    """A broker process with the ACL above and a prepared store."""

    process: BrokerProcess
    config: StoreConfig
    orders_position: int
    unique_key: str
    clients: list[RemoteBroker] = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.process.address


def prepare(broker: Broker) -> tuple[int, str]:
    """orders (4 queues) with 3 messages on queue 0; one dead letter of billing from orders."""
    broker.create_topic("orders", 4)
    receipts = [broker.send(Message("orders", f"order {n}".encode(), unique_key=f"U{n}"),
                            queue_id=0)
                for n in range(3)]
    broker.store.wait_dispatched()
    view = broker.pull("billing", "orders", 0, 2, 1).messages[0]
    broker.send_back("billing", view, delay_level=-1, reason="prepared dead letter")
    broker.store.wait_dispatched()
    return receipts[0].log_position, receipts[0].unique_key


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    store = tmp_path / "store"
    conf = write_broker_conf(tmp_path)
    config = StoreConfig.from_broker_conf(conf, root_dir=store)
    with Broker.open(config) as broker:
        position, unique_key = prepare(broker)
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    process = BrokerProcess(store, broker_conf=conf, acl=acl).start()
    running = Secured(process, config, position, unique_key)
    yield running
    for client in running.clients:
        client.close()
    assert process.stop() == 0, process.stderr_text()


def operations(secured: Secured) -> list[tuple[str, dict, bytes, set[str]]]:
    """(method, header, payload, rights it needs) for every method but Hello and
    ConsumerGroups (tested on their own)."""
    queue = {"group": "billing", "topic": "orders", "queue_id": 0}
    send_header = message_header(Message("orders", b"x"), None, None)
    fresh = message_header(Message("fresh-by-send", b"x"), None, None)
    fresh_batch = message_header(Message("fresh-by-batch", b"x"), None, None)
    return [
        ("Send", send_header, b"x", {"topic_pub"}),
        ("Send", fresh, b"x", {"topic_pub", "create"}),
        ("SendBatch", {"messages": [send_header], "sizes": [1]}, b"x", {"topic_pub"}),
        ("SendBatch", {"messages": [fresh_batch], "sizes": [1]}, b"x", {"topic_pub", "create"}),
        ("Pull", {**queue, "offset": 0, "max_count": 1, "suspend_timeout_ms": 0}, b"",
         {"topic_sub", "group_sub"}),
        ("Pull", {**queue, "topic": "%DLQ%billing", "offset": 0, "max_count": 1,
                  "suspend_timeout_ms": 0}, b"", {"group_sub"}),
        ("WaitForArrival", {"positions": [["orders", 0, 0]], "timeout_ms": 0}, b"",
         {"topic_sub"}),
        ("CommitOffset", {**queue, "offset": 1}, b"", {"topic_sub", "group_sub"}),
        ("QueryOffset", queue, b"", {"topic_sub", "group_sub"}),
        ("StartOffset", {**queue, "consume_from": "first"}, b"", {"topic_sub", "group_sub"}),
        ("SendBack", {**queue, "queue_offset": 0, "log_position": secured.orders_position,
                      "delay_level": 0}, b"", {"topic_sub", "group_sub"}),
        ("CreateTopic", {"topic": "made", "perm": 6, "order": False}, b"", {"create"}),
        ("TopicConfig", {"topic": "orders"}, b"", {"topic_any"}),
        ("QueueIds", {"topic": "orders"}, b"", {"topic_any"}),
        ("SubscriptionGroup", {"group": "billing"}, b"", {"group_sub"}),
        ("RegisterConsumer", {"group": "billing", "client_id": "c-1", "topics": ["orders"]},
         b"", {"topic_sub", "group_sub"}),
        ("UnregisterConsumer", {"group": "billing", "client_id": "c-1"}, b"", {"group_sub"}),
        ("ConsumerIds", {"group": "billing"}, b"", {"group_sub"}),
        ("WatchMembership", {"versions": {"billing": 0}, "timeout_ms": 0}, b"",
         {"group_sub"}),
        ("LockQueues", {"group": "billing", "client_id": "c-1", "queues": [["orders", 0]]},
         b"", {"topic_sub", "group_sub"}),
        ("UnlockQueues", {"group": "billing", "client_id": "c-1", "queues": [["orders", 0]]},
         b"", {"topic_sub", "group_sub"}),
        ("ConsumerProgress", {"group": "billing"}, b"", {"group_sub"}),
        ("DeadLetters", {"group": "billing", "offset": 0, "max_count": 10}, b"",
         {"group_sub"}),
        ("FindByUniqueKey", {"topic": "orders", "unique_key": secured.unique_key}, b"",
         {"topic_sub"}),
        ("ResendDeadLetter", {"group": "billing", "queue_offset": 0}, b"",
         {"topic_pub", "group_sub"}),
    ]


def test_every_method_is_covered(secured):
    tested = {method for method, *_ in operations(secured)} | {"Hello", "ConsumerGroups"}
    assert tested == set(METHODS)


def test_each_operation_is_refused_to_a_key_lacking_each_right_it_needs(secured):
    for method, header, payload, needs in operations(secured):
        for right in sorted(needs):
            code, _ = call(secured.address, credentials(LACKING[right]), method, header,
                           payload)
            assert code is grpc.StatusCode.PERMISSION_DENIED, (method, header, right, code)
        for right in sorted(set(LACKING) - needs - {"topic_any"}):
            if right == "topic_sub" and "topic_any" in needs:
                continue
            code, _ = call(secured.address, credentials(LACKING[right]), method, header,
                           payload)
            assert code is not grpc.StatusCode.PERMISSION_DENIED, (method, header, right)
        code, _ = call(secured.address, credentials("all"), method, header, payload)
        assert code is grpc.StatusCode.OK, (method, header, code)
        for who in (None, Credentials("all", "wrong-secret"), Credentials("nobody", "x")):
            code, _ = call(secured.address, who, method, header, payload)
            assert code is grpc.StatusCode.UNAUTHENTICATED, (method, who)


def test_hello_needs_a_valid_key_and_consumer_groups_lists_only_the_callers(secured):
    assert call(secured.address, credentials("no-topic-right"), "Hello", {})[0] \
        is grpc.StatusCode.OK
    assert call(secured.address, None, "Hello", {})[0] is grpc.StatusCode.UNAUTHENTICATED
    code, answer = call(secured.address, credentials("all"), "ConsumerGroups", {})
    assert code is grpc.StatusCode.OK and "billing" in answer["groups"]
    code, answer = call(secured.address, credentials("no-group"), "ConsumerGroups", {})
    assert code is grpc.StatusCode.OK and "billing" not in answer["groups"]
    assert call(secured.address, None, "ConsumerGroups", {})[0] \
        is grpc.StatusCode.UNAUTHENTICATED


def forged_record(directory: Path, topic: str, body: bytes) -> bytes:
    """A well-formed commit-log record (CRCs right) built in a scratch store: what an attacker
    can produce without any right on the broker under attack."""
    with Broker.open(StoreConfig(root_dir=directory)) as scratch:
        scratch.send(Message(topic, body), queue_id=0)
        scratch.store.wait_dispatched()
        return encode_record(scratch.pull("billing", topic, 0, 0, 1).messages[0])


def test_forged_record_cannot_be_sent_back_and_resent_to_another_topic(secured, tmp_path):
    """The issue's attack: a key with SUB on group billing and no topic right."""
    forged = forged_record(tmp_path / "forge", "payments", b"FORGED: pay mallory 1000000")
    mallory = credentials("mallory")
    old_form = {"group": "billing", "delay_level": -1, "max_reconsume_times": None,
                "reason": None}
    assert call(secured.address, mallory, "SendBack", old_form, forged)[0] \
        is not grpc.StatusCode.OK  # into %DLQ%billing
    assert call(secured.address, mallory, "SendBack", {**old_form, "delay_level": 0},
                forged)[0] is not grpc.StatusCode.OK  # into %RETRY%billing, "from payments"
    reference = {"group": "billing", "topic": "orders", "queue_id": 0, "queue_offset": 0,
                 "log_position": secured.orders_position, "delay_level": -1}
    assert call(secured.address, mallory, "SendBack", reference, forged)[0] \
        is grpc.StatusCode.PERMISSION_DENIED  # a real record, but mallory may not read orders
    assert call(secured.address, mallory, "ResendDeadLetter",
                {"group": "billing", "queue_offset": 0})[0] \
        is grpc.StatusCode.PERMISSION_DENIED  # the real dead letter: no PUB on orders
    assert call(secured.address, mallory, "ResendDeadLetter",
                {"group": "billing", "queue_offset": 1})[0] \
        is not grpc.StatusCode.OK  # where the forged record would have been
    assert secured.process.stop() == 0
    with Broker.open(secured.config) as broker:
        assert broker.topic_config("payments") is None
        assert broker.store.max_offset("%DLQ%billing", 0) == 1  # the prepared dead letter only
        assert broker.store.max_offset("%RETRY%billing", 0) == 0
        orders = [view.body for queue_id in range(4)
                  for view in broker.pull("check", "orders", queue_id, 0, 32).messages]
        assert sorted(orders) == [b"order 0", b"order 1", b"order 2"]


def test_send_back_takes_the_stored_record_the_caller_read(secured):
    client = RemoteBroker(secured.address, credentials=credentials("all"))
    secured.clients.append(client)
    view = client.pull("billing", "orders", 0, 1, 1).messages[0]
    result = client.send_back("billing", view, delay_level=1)
    assert result.outcome.value == "retry"
    header = {"group": "billing", "topic": "orders", "queue_id": 0, "queue_offset": 1,
              "log_position": view.log_position + 1, "delay_level": 1}
    code, _ = call(secured.address, credentials("all"), "SendBack", header)
    assert code is grpc.StatusCode.NOT_FOUND  # the position does not match that entry
    assert secured.process.stop() == 0
    with Broker.open(secured.config) as broker:
        copy = broker.store.read_message(result.receipt.log_position)
        assert (copy.body, copy.properties["REAL_TOPIC"], copy.properties["RETRY_TOPIC"]) \
            == (b"order 1", "%RETRY%billing", "orders")
