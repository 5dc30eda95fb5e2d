"""``RemoteBroker``: the framework's ``BrokerClient`` over gRPC, talking to ``postbox.v1.Broker``.

It has the same methods, arguments, return values and exceptions as the embedded ``Broker``
(``framework.transport.BrokerClient`` describes them; this package does not import the
framework), so a ``grpc://host:port`` app runs the producer, handlers, outbox and idempotency
exactly as a ``file://`` app does. Stored messages arrive as commit-log records decoded into
``MessageView`` objects; a ``StorageError`` raised by the broker is raised here with the same
class; a broker that cannot be reached raises ``BrokerUnavailableError`` (never a hang: every
call has a deadline, ``timeout_ms`` beyond any wait it asks for).

Long waits (``wait_for_arrival``, ``pull`` with a suspend timeout) run as cancellable calls:
``cancel()`` and ``wake_waiters()`` end them as they end the embedded waits. Membership: see
``MembershipWatch`` — listeners fire when a watched group changes, and registrations are
kept alive with heartbeats. With ``credentials`` every call carries the signed metadata of
``network.grpc_v2.auth``.

Thread-safety: every method may be called from any thread; one channel serves them all.
``close`` cancels open calls, stops the watch thread and closes the channel.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import grpc

from storage_engine.broker.config_beans import SubscriptionGroupConfig, TopicConfig
from storage_engine.broker.model import ConsumeFrom, QueueProgress, SendBackResult, SendResult
from storage_engine.errors import InvalidMessageError, StoreClosedError
from storage_engine.formats import MessageView, body_problem
from storage_engine.store.message import GetResult, Message

from .codec import (
    decode_records,
    get_result_from,
    group_config_from_json,
    message_header,
    progress_from_json,
    receipt_from_json,
    send_back_from_json,
    topic_config_from_json,
)
from .error_status import error_from_detail, error_from_rpc
from .frame import encode_json, pack, pack_encoded, unpack
from .inflight_calls import InFlightCalls
from .membership_watch import MembershipWatch
from .postbox_service import METHODS, SERVICE_NAME
from .send_coalescer import SendCoalescer

if TYPE_CHECKING:
    from .auth import Credentials

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]

TIMEOUT_MS = 10_000
"""Deadline of an ordinary call, and the margin added to a long wait's own timeout."""
HEARTBEAT_INTERVAL_MS = 30_000
"""Keep-alive of registrations (``broker.consumer_expiry_ms`` is 120 s by default)."""
BUSY_BACKOFF_MS = 200
"""Wait locally this long when the server had no long-wait slot free."""
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", -1),  # a pull of 32 large messages is one response
    ("grpc.max_send_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 200),  # find a restarted broker quickly
    ("grpc.max_reconnect_backoff_ms", 2_000),
)
_client_counter = itertools.count(1)


class RemoteBroker:
    """A ``BrokerClient`` for the broker at ``address`` (``host:port``).

    Args:
        address: the broker's ``host:port``.
        credentials: access key and secret key, when the broker enforces access control.
        timeout_ms: deadline of ordinary calls (and margin on long waits).
        heartbeat_interval_ms: keep-alive period of this client's consumer registrations.
    """

    def __init__(self, address: str, *, credentials: Credentials | None = None,
                 timeout_ms: int = TIMEOUT_MS,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS) -> None:
        if not isinstance(address, str) or not address:
            raise InvalidMessageError(f"broker address must be 'host:port', got {address!r}")
        self.address = address
        self.client_id = f"{socket.gethostname()}@{os.getpid()}#{next(_client_counter)}"
        self._timeout_s = timeout_ms / 1000  # grpc takes float seconds
        self._credentials = credentials
        self._signed_metadata = _metadata_signer(credentials)
        self._channel = grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS))
        self._stubs: dict[str, grpc.UnaryUnaryMultiCallable[bytes, bytes]] = {
            method: self._channel.unary_unary(f"/{SERVICE_NAME}/{method}") for method in METHODS}
        self._inflight = InFlightCalls()
        self._sends = SendCoalescer(self._send_batch)
        self._closed = False
        self._close_lock = threading.Lock()
        self._membership = MembershipWatch(self._watch_call, self.register_consumer,
                                           heartbeat_interval_ms=heartbeat_interval_ms,
                                           name=self.client_id)

    def __repr__(self) -> str:
        return f"RemoteBroker({self.address!r})"

    # ---- calls ---------------------------------------------------------------------------------

    def _metadata(self) -> tuple[tuple[str, str | bytes], ...] | None:
        if self._signed_metadata is None:
            return None
        return tuple(self._signed_metadata(self.client_id))

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"remote broker client for {self.address} is closed")

    def _call(self, method: str, header: Mapping[str, Any], payload: bytes = b""
              ) -> tuple[dict[str, Any], bytes]:
        """One unary call with the ordinary deadline."""
        return self._call_encoded(method, encode_json(header), payload)

    def _call_encoded(self, method: str, head: bytes, payload: bytes
                      ) -> tuple[dict[str, Any], bytes]:
        self._check_open()
        try:
            response = self._stubs[method](pack_encoded(head, payload), timeout=self._timeout_s,
                                           metadata=self._metadata())
        except grpc.RpcError as error:
            raise error_from_rpc(error, self.address, method) from None
        fields, body = unpack(response)
        return fields.values, body

    def _long_call(self, method: str, header: Mapping[str, Any], wait_ms: int,
                   cancel: Callable[[], bool] | None) -> tuple[dict[str, Any], bytes] | None:
        """A call that may wait ``wait_ms`` on the server; None when cancelled or woken."""
        self._check_open()
        future = self._stubs[method].future(pack(header),
                                            timeout=wait_ms / 1000 + self._timeout_s,
                                            metadata=self._metadata())
        try:
            response = self._inflight.run(future, cancel)
        except grpc.RpcError as error:
            if self._closed:
                return None
            raise error_from_rpc(error, self.address, method) from None
        if response is None:
            return None
        fields, body = unpack(response)
        return fields.values, body

    # ---- sending -------------------------------------------------------------------------------

    def send(self, message: Message, *, queue_id: int | None = None,
             sharding_key: str | None = None) -> SendResult:
        """Store a message (see ``Broker.send``)."""
        body = message.body
        if problem := body_problem(body):
            raise InvalidMessageError(problem, topic=message.topic if isinstance(
                message.topic, str) else None)
        header = encode_json(message_header(message, queue_id, sharding_key))
        receipt: SendResult = self._sends.submit(message.topic, header, bytes(body))
        return receipt

    def _send_batch(self, headers: list[bytes], bodies: list[bytes]) -> list[Any]:
        """One ``SendBatch`` call (headers already JSON); a receipt or a storage error per
        message."""
        sizes = ",".join(str(len(body)) for body in bodies).encode("ascii")
        head = b"".join((b'{"messages":[', b",".join(headers), b'],"sizes":[', sizes, b"]}"))
        values, _ = self._call_encoded("SendBatch", head, b"".join(bodies))
        return [_receipt(result["receipt"]) if "receipt" in result
                else error_from_detail(result["error"]) for result in values["results"]]

    def send_back(self, group: str, message: MessageView, *, delay_level: int = 0,
                  max_reconsume_times: int | None = None,
                  reason: str | None = None) -> SendBackResult:
        """Send a failed message to ``%RETRY%group`` or the DLQ (see ``Broker.send_back``).

        ``message`` must be a record as read from this broker: the call names it by topic,
        queue, queue offset and log position, and the broker reads it itself."""
        values, _ = self._call("SendBack", {
            "group": group, "topic": message.topic, "queue_id": message.queue_id,
            "queue_offset": message.queue_offset, "log_position": message.log_position,
            "delay_level": delay_level, "max_reconsume_times": max_reconsume_times,
            "reason": reason,
        })
        return send_back_from_json(values)

    def resend_dead_letter(self, group: str, queue_offset: int) -> SendResult:
        """Send a dead letter again to its original topic (see ``Broker.resend_dead_letter``)."""
        values, _ = self._call("ResendDeadLetter", {"group": group, "queue_offset": queue_offset})
        return _receipt(values)

    def find_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]:
        """Messages of ``topic`` with this ``UNIQ_KEY``."""
        values, payload = self._call("FindByUniqueKey", {"topic": topic,
                                                         "unique_key": unique_key})
        return decode_records(payload, values["count"])

    # ---- pull and long polling -----------------------------------------------------------------

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
             tags: str | None = None, suspend_timeout_ms: int = 0) -> GetResult:
        """Read from a queue, waiting up to ``suspend_timeout_ms`` when nothing is there."""
        header = {"group": group, "topic": topic, "queue_id": queue_id, "offset": offset,
                  "max_count": max_count, "tags": tags, "suspend_timeout_ms": suspend_timeout_ms}
        if type(suspend_timeout_ms) is int and suspend_timeout_ms > 0:
            answer = self._long_call("Pull", header, suspend_timeout_ms, None)
            if answer is None:  # woken: read once more without waiting, as the broker does
                header["suspend_timeout_ms"] = 0
                answer = self._call("Pull", header)
        else:
            answer = self._call("Pull", header)
        values, payload = answer
        return get_result_from(values, payload)

    def wait_for_arrival(self, positions: Mapping[QueueKey, int], timeout_ms: int,
                         cancel: Callable[[], bool] | None = None) -> bool:
        """Block until some queue grows past its position; False on timeout, wake or cancel."""
        rows = [[topic, queue_id, offset] for (topic, queue_id), offset in positions.items()]
        answer = self._long_call("WaitForArrival", {"positions": rows, "timeout_ms": timeout_ms},
                                 max(0, timeout_ms), cancel)
        if answer is None:
            return False
        values, _ = answer
        if values["busy"]:
            log.debug("[remote] %s had no wait slot free; backing off", self.address)
            self._inflight.sleep(min(timeout_ms, BUSY_BACKOFF_MS) / 1000, cancel)
        return bool(values["arrived"])

    def wake_waiters(self) -> None:
        """End every wait this client has open (shutdown, rebalance)."""
        self._inflight.wake_all()

    # ---- offsets -------------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next one ``group`` consumes."""
        self._call("CommitOffset", {"group": group, "topic": topic, "queue_id": queue_id,
                                    "offset": offset})

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed next offset, or None."""
        values, _ = self._call("QueryOffset", {"group": group, "topic": topic,
                                               "queue_id": queue_id})
        offset: int | None = values["offset"]
        return offset

    def start_offset(self, group: str, topic: str, queue_id: int,
                     consume_from: ConsumeFrom = ConsumeFrom.LAST,
                     timestamp_ms: int | None = None) -> int:
        """Committed offset, else the consume-from rule."""
        if not isinstance(consume_from, ConsumeFrom):
            raise InvalidMessageError(f"consume_from must be a ConsumeFrom, got "
                                      f"{consume_from!r}", topic=topic)
        values, _ = self._call("StartOffset", {
            "group": group, "topic": topic, "queue_id": queue_id,
            "consume_from": consume_from.value, "timestamp_ms": timestamp_ms})
        offset: int = values["offset"]
        return offset

    # ---- topics and groups ---------------------------------------------------------------------

    def create_topic(self, topic: str, queue_count: int | None = None, *, perm: int = 6,
                     order: bool = False) -> TopicConfig:
        """Create or update a topic."""
        values, _ = self._call("CreateTopic", {"topic": topic, "queue_count": queue_count,
                                               "perm": perm, "order": order})
        config = topic_config_from_json(values["config"])
        assert config is not None
        return config

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        values, _ = self._call("TopicConfig", {"topic": topic})
        return topic_config_from_json(values["config"])

    def queue_ids(self, topic: str) -> list[int]:
        """Readable queue ids of a topic; [] when unknown."""
        values, _ = self._call("QueueIds", {"topic": topic})
        queue_ids: list[int] = values["queue_ids"]
        return queue_ids

    def subscription_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's config (created with defaults when auto-creation is on)."""
        values, _ = self._call("SubscriptionGroup", {"group": group})
        return group_config_from_json(values["config"])

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """The group's position on every queue it consumes."""
        values, _ = self._call("ConsumerProgress", {"group": group})
        return progress_from_json(values["progress"])

    def consumer_groups(self) -> list[str]:
        """Every group the broker knows."""
        values, _ = self._call("ConsumerGroups", {})
        groups: list[str] = values["groups"]
        return groups

    def dead_letters(self, group: str, offset: int = 0, max_count: int = 100
                     ) -> list[MessageView]:
        """Dead letters of ``group`` from ``offset``."""
        values, payload = self._call("DeadLetters", {"group": group, "offset": offset,
                                                     "max_count": max_count})
        return decode_records(payload, values["count"])

    # ---- membership and locks ------------------------------------------------------------------

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool:
        """Heartbeat; True when this call changed the group's membership."""
        if isinstance(topics, str):
            raise InvalidMessageError(f"topics must be an iterable of names, not the str "
                                      f"{topics!r}")
        names = list(topics)
        values, _ = self._call("RegisterConsumer", {"group": group, "client_id": client_id,
                                                    "topics": names})
        self._membership.registered(group, client_id, names, changed=values["changed"],
                                    version=values["version"], epoch=values["epoch"])
        changed: bool = values["changed"]
        return changed

    def unregister_consumer(self, group: str, client_id: str) -> None:
        """Remove a member; listeners hear of the change."""
        self._membership.forget(group, client_id)  # no keep-alive may re-register it
        values, _ = self._call("UnregisterConsumer", {"group": group, "client_id": client_id})
        self._membership.unregistered(group, client_id, version=values["version"],
                                      epoch=values["epoch"])

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of ``group``, sorted."""
        values, _ = self._call("ConsumerIds", {"group": group})
        ids: list[str] = values["ids"]
        return ids

    def add_membership_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(group)`` whenever a group this client has members in changes."""
        self._membership.add_listener(listener)

    def _watch_call(self, known: dict[str, int], epoch: str | None, timeout_ms: int
                    ) -> tuple[dict[str, int], str, bool] | None:
        answer = self._long_call("WatchMembership", {"versions": known, "epoch": epoch,
                                                     "timeout_ms": timeout_ms}, timeout_ms,
                                 lambda: self._closed)
        if answer is None:
            return None
        values, _ = answer
        return values["versions"], values["epoch"], values["busy"]

    def lock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]
                    ) -> set[QueueKey]:
        """Lock or renew queues for orderly consumption; the ones now held."""
        values, _ = self._call("LockQueues", {"group": group, "client_id": client_id,
                                              "queues": [list(q) for q in queues]})
        return {(topic, queue_id) for topic, queue_id in values["queues"]}

    def unlock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None:
        """Release the given queues where ``client_id`` holds them."""
        self._call("UnlockQueues", {"group": group, "client_id": client_id,
                                    "queues": [list(q) for q in queues]})

    # ---- lifecycle -----------------------------------------------------------------------------

    def hello(self) -> dict[str, Any]:
        """The server's protocol version, epoch and long-polling cap (a connection check)."""
        values, _ = self._call("Hello", {})
        return values

    def close(self) -> None:
        """Cancel open calls, stop the membership thread and close the channel."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._inflight.wake_all()
        self._membership.close()
        self._channel.close()

    def __enter__(self) -> RemoteBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _receipt(values: dict[str, Any]) -> SendResult:
    receipt = receipt_from_json(values)
    assert receipt is not None
    return receipt


def _metadata_signer(credentials: Credentials | None
                     ) -> Callable[[str], list[tuple[str, str]]] | None:
    """``auth.signed_metadata`` bound to ``credentials`` (imported only when needed)."""
    if credentials is None:
        return None
    from .auth import signed_metadata

    return lambda client_id: signed_metadata(credentials, client_id)


__all__ = ["BUSY_BACKOFF_MS", "CHANNEL_OPTIONS", "HEARTBEAT_INTERVAL_MS", "TIMEOUT_MS",
           "RemoteBroker"]
