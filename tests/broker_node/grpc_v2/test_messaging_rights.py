"""Every ``apache.rocketmq.v2.MessagingService`` call checks the caller's rights on every topic
and group it reads or writes (issue 19, item 5), against a real ``postbox broker start --acl``.

Each call is made with keys that lack exactly one right (PUB or SUB on the topic, SUB on the
group, the create right) and must be answered ``FORBIDDEN``; a key with every right gets past
access control (whatever the call then answers); an unsigned call is ``UNAUTHORIZED``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from postbox.broker_node.grpc_v2.auth import Credentials, signed_metadata
from postbox.broker_node.grpc_v2.protocol import Code, definition, service
from postbox.broker_node.grpc_v2.servicer import MessagingServicer
from postbox.storage_engine import Broker, Message
from tests.broker_node.grpc_v2.raw_calls import TIMEOUT_S, queue, resource, send_request, stub
from tests.support.acl_keys import ALL, KEYS_LACKING_ONE_RIGHT

KEYS = {**KEYS_LACKING_ONE_RIGHT, "orders-only": {**ALL, "topics": {"orders": "PUB|SUB"}}}
ACL = {"accounts": [{"access_key": name, "secret_key": f"{name}-secret", **rights}
                    for name, rights in KEYS.items()]}
LACKING = {"topic_pub": "no-topic-pub", "topic_sub": "no-topic-sub",
           "topic_any": "no-topic-right", "group_sub": "no-group", "create": "no-create"}
HANDLE = "pb1 {topic} 0 0 0123456789abcdef"
"""A well-formed receipt handle; its lease does not exist (INVALID_RECEIPT_HANDLE)."""

Call = Callable[[str, list | None], int]
"""(address, metadata) -> the v2 status code of the answer."""


def metadata_for(name: str | None) -> list | None:
    if name is None:
        return None
    return signed_metadata(Credentials(name, f"{name}-secret"), f"client-{name}")


def first_status(responses: Iterator) -> int:
    for response in responses:
        if response.HasField("status"):
            return response.status.code
    raise AssertionError("no status in the answer")


def unary(method: str, request) -> Call:
    return lambda address, metadata: getattr(stub(address), method)(
        request, metadata=metadata, timeout=TIMEOUT_S).status.code


def streamed(method: str, request) -> Call:
    return lambda address, metadata: first_status(getattr(stub(address), method)(
        request, metadata=metadata, timeout=TIMEOUT_S))


def telemetry(settings: definition.Settings) -> Call:
    return lambda address, metadata: first_status(stub(address).Telemetry(
        iter([service.TelemetryCommand(settings=settings)]), metadata=metadata,
        timeout=TIMEOUT_S))


def receive_request(topic: str = "orders") -> service.ReceiveMessageRequest:
    request = service.ReceiveMessageRequest(group=resource("billing"), message_queue=queue(topic),
                                            batch_size=1)
    request.invisible_duration.seconds = 1
    request.long_polling_timeout.seconds = 0
    return request


def handle_calls(topic: str, handle_topic: str) -> list[tuple[str, Call]]:
    """Ack, change-invisible and forward-to-DLQ of a handle naming ``handle_topic``."""
    handle = HANDLE.format(topic=handle_topic)
    common = {"group": resource("billing"), "topic": resource(topic)}
    change = service.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="M",
                                                    **common)
    change.invisible_duration.seconds = 5
    return [
        ("AckMessage", unary("AckMessage", service.AckMessageRequest(
            entries=[service.AckMessageEntry(message_id="M", receipt_handle=handle)],
            **common))),
        ("ChangeInvisibleDuration", unary("ChangeInvisibleDuration", change)),
        ("ForwardMessageToDeadLetterQueue", unary(
            "ForwardMessageToDeadLetterQueue", service.ForwardMessageToDeadLetterQueueRequest(
                receipt_handle=handle, message_id="M", delivery_attempt=1,
                max_delivery_attempts=16, **common))),
    ]


def operations() -> list[tuple[str, Call, set[str]]]:
    """(call name, call, rights it needs)."""
    orders0 = queue("orders", 0)
    producer = definition.Settings(client_type=definition.PRODUCER, publishing=definition.
                                   Publishing(topics=[resource("orders")]))
    consumer = definition.Settings(client_type=definition.SIMPLE_CONSUMER)
    consumer.subscription.group.name = "billing"
    consumer.subscription.subscriptions.add(topic=resource("orders"))
    query_offset = service.QueryOffsetRequest(message_queue=orders0,
                                              query_offset_policy=definition.BEGINNING)
    pull = service.PullMessageRequest(group=resource("billing"), message_queue=orders0,
                                      offset=0, batch_size=1)
    dlq_pull = service.PullMessageRequest(group=resource("billing"),
                                          message_queue=queue("%DLQ%billing", 0), offset=0,
                                          batch_size=1)
    return [
        ("QueryRoute", unary("QueryRoute", service.QueryRouteRequest(topic=resource("orders"))),
         {"topic_any"}),
        ("Heartbeat", unary("Heartbeat", service.HeartbeatRequest(
            group=resource("billing"), client_type=definition.SIMPLE_CONSUMER)), {"group_sub"}),
        ("Telemetry", telemetry(producer), {"topic_pub"}),
        ("Telemetry", telemetry(consumer), {"topic_sub", "group_sub"}),
        ("SendMessage", unary("SendMessage", send_request("orders", b"x")), {"topic_pub"}),
        ("SendMessage", unary("SendMessage", send_request("fresh-by-v2", b"x")),
         {"topic_pub", "create"}),
        ("QueryAssignment", unary("QueryAssignment", service.QueryAssignmentRequest(
            topic=resource("orders"), group=resource("billing"))), {"topic_sub", "group_sub"}),
        ("ReceiveMessage", streamed("ReceiveMessage", receive_request()),
         {"topic_sub", "group_sub"}),
        *((name, call, {"topic_sub", "group_sub"})
          for name, call in handle_calls("orders", "orders")),
        ("PullMessage", streamed("PullMessage", pull), {"topic_sub", "group_sub"}),
        ("PullMessage", streamed("PullMessage", dlq_pull), {"group_sub"}),
        ("UpdateOffset", unary("UpdateOffset", service.UpdateOffsetRequest(
            group=resource("billing"), message_queue=orders0, offset=1)),
         {"topic_sub", "group_sub"}),
        ("GetOffset", unary("GetOffset", service.GetOffsetRequest(
            group=resource("billing"), message_queue=orders0)), {"topic_sub", "group_sub"}),
        ("QueryOffset", unary("QueryOffset", query_offset), {"topic_sub"}),
        ("NotifyClientTermination", unary("NotifyClientTermination",
                                          service.NotifyClientTerminationRequest(
                                              group=resource("billing"))), {"group_sub"}),
        ("EndTransaction", unary("EndTransaction", service.EndTransactionRequest(
            topic=resource("orders"), message_id="0102AB", transaction_id="no-such-half",
            resolution=definition.COMMIT)), {"topic_pub"}),
        ("RecallMessage", unary("RecallMessage", service.RecallMessageRequest()), set()),
        ("SyncLiteSubscription", unary("SyncLiteSubscription",
                                       service.SyncLiteSubscriptionRequest()), set()),
    ]


def prepare(broker: Broker) -> None:
    broker.create_topic("orders", 4)
    broker.create_topic("payments", 4)
    broker.send(Message("orders", b"order"), queue_id=0)
    broker.store.wait_dispatched()
    broker.send_back("billing", broker.pull("billing", "orders", 0, 0, 1).messages[0],
                     delay_level=-1)


def start(broker_server, tmp_path: Path):
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    return broker_server(acl=acl, prepare=prepare)


def test_every_call_is_covered():
    names = {name for name, *_ in operations()}
    declared = {name for name in dir(MessagingServicer) if name[0].isupper()}
    assert names == declared


def test_each_call_is_refused_to_a_key_lacking_each_right_it_needs(broker_server, tmp_path):
    server = start(broker_server, tmp_path)
    for name, make_call, needs in operations():
        for right in sorted(needs):
            code = make_call(server.address, metadata_for(LACKING[right]))
            assert code == Code.FORBIDDEN, (name, right, code)
        code = make_call(server.address, metadata_for("all"))
        assert code not in (Code.FORBIDDEN, Code.UNAUTHORIZED), (name, code)
        assert make_call(server.address, None) == Code.UNAUTHORIZED, name


def test_receipt_handles_are_checked_against_the_topic_they_name(broker_server, tmp_path):
    """A key with rights on orders only cannot settle a lease on payments by naming orders in
    the request and payments in the handle."""
    server = start(broker_server, tmp_path)
    for name, make_call in handle_calls("orders", "payments"):
        assert make_call(server.address, metadata_for("orders-only")) == Code.FORBIDDEN, name
    for name, make_call in handle_calls("orders", "%RETRY%billing"):  # the group's own
        assert make_call(server.address, metadata_for("orders-only")) \
            == Code.INVALID_RECEIPT_HANDLE, name


def test_rights_are_checked_before_a_topic_is_looked_up(broker_server, tmp_path):
    """A key without rights on a topic cannot learn whether it exists."""
    server = start(broker_server, tmp_path)
    for topic in ("payments", "no-such-topic"):
        pull = service.PullMessageRequest(group=resource("billing"), message_queue=queue(topic),
                                          offset=0, batch_size=1)
        assert streamed("PullMessage", pull)(server.address, metadata_for("orders-only")) \
            == Code.FORBIDDEN, topic
        offset = service.QueryOffsetRequest(message_queue=queue(topic),
                                            query_offset_policy=definition.END)
        assert unary("QueryOffset", offset)(server.address, metadata_for("orders-only")) \
            == Code.FORBIDDEN, topic
