"""Direct MessagingService calls with the generated stub (what a client could send, including
what the official client never would: bad names, unsigned calls, oversized requests)."""

from __future__ import annotations

import grpc

from postbox.broker_node.grpc_v2.protocol import definition, service, service_grpc

TIMEOUT_S = 10


def stub(address: str, max_message_bytes: int = 64 * 1024 * 1024
         ) -> service_grpc.MessagingServiceStub:
    """A stub on a fresh channel."""
    channel = grpc.insecure_channel(address, options=[
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes)])
    return service_grpc.MessagingServiceStub(channel)


def resource(name: str) -> definition.Resource:
    return definition.Resource(name=name)


def queue(topic: str, queue_id: int = 0) -> definition.MessageQueue:
    return definition.MessageQueue(topic=resource(topic), id=queue_id)


def send_request(topic: str, body: bytes, message_id: str = "0102AB") -> service.SendMessageRequest:
    proto = definition.Message(topic=resource(topic), body=body)
    proto.system_properties.message_id = message_id
    proto.system_properties.message_type = definition.NORMAL
    return service.SendMessageRequest(messages=[proto])


def send(address: str, topic: str, body: bytes, metadata=None) -> service.SendMessageResponse:
    return stub(address).SendMessage(send_request(topic, body), metadata=metadata,
                                     timeout=TIMEOUT_S)


def pull_all(address: str, group: str, topic: str, queue_id: int = 0,
             metadata=None) -> list[definition.Message]:
    """Every message of one queue from offset 0 (PullMessage, no long polling)."""
    request = service.PullMessageRequest(group=resource(group), message_queue=queue(topic,
                                                                                     queue_id),
                                         offset=0, batch_size=32)
    responses = list(stub(address).PullMessage(request, metadata=metadata, timeout=TIMEOUT_S))
    return [response.message for response in responses if response.HasField("message")]


def pull_status(address: str, group: str, topic: str, metadata=None) -> definition.Status:
    request = service.PullMessageRequest(group=resource(group), message_queue=queue(topic),
                                         offset=0, batch_size=32)
    for response in stub(address).PullMessage(request, metadata=metadata, timeout=TIMEOUT_S):
        if response.HasField("status"):
            return response.status
    raise AssertionError("no status in the PullMessage answer")


def receive_status(address: str, group: str, topic: str, metadata=None) -> definition.Status:
    """The status of a ReceiveMessage with a 1 s invisible time and no long polling."""
    request = service.ReceiveMessageRequest(group=resource(group), message_queue=queue(topic),
                                            batch_size=1)
    request.invisible_duration.seconds = 1
    request.long_polling_timeout.seconds = 0
    for response in stub(address).ReceiveMessage(request, metadata=metadata,
                                                  timeout=TIMEOUT_S):
        if response.HasField("status"):
            return response.status
    raise AssertionError("no status in the ReceiveMessage answer")
