"""``RemotingAccess``: ACL 1.0 on the remoting listeners (``postbox broker start --acl FILE``).

The server calls ``check(request, session)`` before every handler. It authenticates the request
(``AccessKey`` of a known account, a ``Signature`` that matches, ``acl_signature.verify``, and
holds for the request's code, ``acl_signature.code_problem``) and
then checks the account's rights (the ACL file, ``broker_node.acl_file``) on **every topic and group
the request names**, before anything is read or written. A refusal raises
``AccessDeniedError``, answered 16 NO_PERMISSION with the reason in the remark (nothing at all
for a oneway request).

Rights by request ("SUB g" = SUB on the request's group, which also covers its ``%RETRY%g``
and ``%DLQ%g`` topics; "any t" = PUB or SUB on topic t; "create" = the ``create_topics`` right,
needed when the topic does not exist yet and a send would create it; "auth" = a valid
signature only; "admin" = ``"admin": true``):

- SEND_MESSAGE (10, 310, 320): PUB t (+ create); a send to ``%RETRY%g`` (a push consumer
  re-sending a message itself) needs SUB g, as in RocketMQ. A message that names another
  topic in a real-topic property (``RETRY_TOPIC``, ``REAL_TOPIC``: where a retried or
  dead-lettered message goes back to) needs PUB on that topic too (``check_publish``, from
  the handler, for the header's and every batch entry's properties): SUB g alone must not
  let a client plant a message that ``postbox dlq resend`` publishes into a topic it cannot
  write.
- PULL_MESSAGE (11), LITE_PULL_MESSAGE (361), QUERY/UPDATE_CONSUMER_OFFSET (14, 15): SUB t,
  SUB g.
- CONSUMER_SEND_MSG_BACK (36): SUB g, and SUB on ``originTopic`` when given.
- QUERY_MESSAGE (12): SUB t. VIEW_MESSAGE_BY_ID (33): SUB t when ``topic`` is given.
  Both reach a record by its position: their handlers call ``check_topic`` with the record's
  own topic (its ``RETRY_TOPIC`` for a retried one), so the rights that count are the record's.
- GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, GET_EARLIEST_MSG_STORETIME (30, 31, 29, 32):
  any t.
- HEART_BEAT (34): for each consumer of the body SUB g and SUB on each subscribed topic;
  producers: auth. UNREGISTER_CLIENT (35): SUB g when a consumer group is named.
- GET_CONSUMER_LIST_BY_GROUP (38): SUB g. LOCK/UNLOCK_BATCH_MQ (41, 42): SUB g and SUB on
  every queue's topic. END_TRANSACTION (37): PUB t when ``topic`` is given.
- Name server: GET_ROUTEINFO_BY_TOPIC (105): any t (``TBW102``: create); cluster info, topic
  lists, GET_KV_CONFIG / GET_KVLIST_BY_NAMESPACE: auth; REGISTER/UNREGISTER_BROKER,
  DELETE_TOPIC_IN_NAMESRV, PUT/DELETE_KV_CONFIG: admin.
- Broker admin: UPDATE_AND_CREATE_TOPIC (17): create; DELETE_TOPIC_IN_BROKER,
  subscription-group writes (200, 207), GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG:
  admin; GET_TOPIC_STATS_INFO (202), GET_TOPIC_CONFIG (351), QUERY_TOPIC_CONSUME_BY_WHO (300):
  any t;
  GET_CONSUME_STATS (208): SUB g (+ any t when a topic is named); GET_CONSUMER_CONNECTION_LIST
  (203): SUB g; GET_BROKER_RUNTIME_INFO (28): auth.
- Any other code: admin (UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG are refused anyway).

Thread-safety: immutable after construction; ``check`` may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from postbox.network.protocol import fastjson
from postbox.network.protocol.acl_signature import ACCESS_KEY, SIGNATURE, code_problem, verify
from postbox.network.protocol.codes import RequestCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.formats.topic_names import AUTO_CREATE_TOPIC, is_retry_topic

from .acl_file import PUB, SUB, Account, AclSettings, load_acl_file
from .server.errors import AccessDeniedError

ANY = "ANY"
ACCESS_KEY_MAX_CHARS = 128
RC = RequestCode


@dataclass(frozen=True)
class Need:
    """One right a request needs: ``kind`` topic/group, ``name``, ``right`` PUB/SUB/ANY, or a
    flag: ``create`` (the create right for topic ``name``) or ``admin``."""

    kind: str = ""
    name: str = ""
    right: str = ""
    create: bool = False
    admin: bool = False
    even_if_exists: bool = False  # the create right even for an existing topic (it changes it)


ADMIN = Need(admin=True)


class RemotingAccess:
    """Authenticates and authorizes remoting requests against an ACL file's accounts.

    ``topic_exists(topic)`` tells whether a send would create the topic (then the create right
    is needed too); without it every send is treated as to an existing topic.
    """

    def __init__(self, settings: AclSettings,
                 topic_exists: Callable[[str], bool] | None = None) -> None:
        self._settings = settings
        self._topic_exists = topic_exists or (lambda topic: True)

    @classmethod
    def load(cls, path: str | Path, topic_exists: Callable[[str], bool] | None = None
             ) -> RemotingAccess:
        """Read an ACL file (``ConfigError`` when it is invalid)."""
        return cls(load_acl_file(path), topic_exists)

    def authenticate(self, request: RemotingCommand) -> Account:
        """The account whose valid signature ``request`` carries."""
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not access_key:
            raise AccessDeniedError(f"request code {request.code} is not signed: ACL is on "
                                    f"and the {ACCESS_KEY} and {SIGNATURE} fields are required")
        account = self._settings.accounts.get(access_key)
        if account is None:
            raise AccessDeniedError(f"unknown access key {access_key[:ACCESS_KEY_MAX_CHARS]!r}")
        if not verify(request, account.secret_key):
            raise AccessDeniedError(f"bad signature for access key {access_key!r} (request "
                                    f"code {request.code})")
        problem = code_problem(request)
        if problem is not None:
            raise AccessDeniedError(f"access key {access_key!r}: {problem}")
        return account

    def check(self, request: RemotingCommand, session: object = None) -> None:
        """Authenticate ``request`` and check every right it needs (the server's hook)."""
        account = self.authenticate(request)
        try:
            needs = list(needs_of(request))
        except (ValueError, TypeError, KeyError) as error:
            raise AccessDeniedError(f"request code {request.code}: its rights cannot be "
                                    f"established: {error}") from None
        for need in needs:
            _check_need(account, need, self._topic_exists)

    def check_topic(self, request: RemotingCommand, topic: str) -> None:
        """The SUB right on ``topic``, the topic of a record ``request`` reached by its
        commit-log position (view by id, send-back): the topic it names was checked by
        ``check``, this is the one the record really has."""
        _check_need(self.authenticate(request), Need("topic", topic, SUB),
                    self._topic_exists)


    def check_publish(self, request: RemotingCommand, topic: str) -> None:
        """The PUB right on ``topic``, a topic a sent message names in a real-topic property
        (where a retry or dead letter of it would be published)."""
        try:
            _check_need(self.authenticate(request), Need("topic", topic, PUB),
                        self._topic_exists)
        except AccessDeniedError as error:
            raise AccessDeniedError(f"{error.remark}, the topic this message names as its "
                                    "real topic") from None


def _check_need(account: Account, need: Need, topic_exists: Callable[[str], bool]) -> None:
    if account.admin:
        return
    who = f"access key {account.access_key!r}"
    if need.admin:
        raise AccessDeniedError(f"{who} is not an admin (the request needs \"admin\": true)")
    if need.create:
        if (need.even_if_exists or not topic_exists(need.name)) \
                and not account.may_create_topics:
            raise AccessDeniedError(f"{who} may not create or change topic {need.name!r} (the "
                                    "ACL file's create_topics grants it)")
        return
    rights = (PUB, SUB) if need.right == ANY else (need.right,)
    if not any(account.may(need.kind, need.name, right) for right in rights):
        wanted = "PUB or SUB" if need.right == ANY else need.right
        raise AccessDeniedError(f"{who} has no {wanted} right on {need.kind} {need.name!r}")


def needs_of(request: RemotingCommand) -> Iterator[Need]:
    """Every right ``request`` needs (``ValueError`` when its fields or body do not say)."""
    rule = _RULES.get(request.code)
    if rule is None:
        yield ADMIN
        return
    yield from rule(request.ext_fields, request.body)


Fields = dict[str, str]


def _topic(name: str | None, right: str) -> Iterator[Need]:
    if name is None:
        raise ValueError("the topic field is missing")
    yield Need("topic", name, right)


def _group(name: str | None) -> Iterator[Need]:
    if name is None:
        raise ValueError("the group field is missing")
    yield Need("group", name, SUB)


def _send(topic_key: str, group_key: str) -> Callable[[Fields, bytes], Iterator[Need]]:
    def needs(fields: Fields, body: bytes) -> Iterator[Need]:
        topic = fields.get(topic_key)
        if topic is not None and is_retry_topic(topic):
            yield from _topic(topic, SUB)  # SUB on %RETRY%g comes with SUB on g
            return
        yield from _topic(topic, PUB)
        yield Need("topic", topic or "", create=True)
    return needs


def _topic_and_group(fields: Fields, body: bytes) -> Iterator[Need]:
    yield from _topic(fields.get("topic"), SUB)
    yield from _group(fields.get("consumerGroup"))


def _send_back(fields: Fields, body: bytes) -> Iterator[Need]:
    yield from _group(fields.get("group"))
    if fields.get("originTopic"):  # the record's own topic: check_topic, from the handler
        yield Need("topic", fields["originTopic"], SUB)


def _view(fields: Fields, body: bytes) -> Iterator[Need]:
    if fields.get("topic"):  # the record's own topic: check_topic, from the handler
        yield Need("topic", fields["topic"], SUB)


def _heartbeat(fields: Fields, body: bytes) -> Iterator[Need]:
    document = fastjson.loads(body) if body else {}
    for consumer in _objects(document.get("consumerDataSet")):
        yield from _group(consumer.get("groupName"))
        for subscription in _objects(consumer.get("subscriptionDataSet")):
            yield from _topic(subscription.get("topic"), SUB)


def _locks(fields: Fields, body: bytes) -> Iterator[Need]:
    document = fastjson.loads(body) if body else {}
    yield from _group(document.get("consumerGroup"))
    for queue in _objects(document.get("mqSet")):
        yield from _topic(queue.get("topic"), SUB)


def _objects(value: Any) -> Iterable[dict[str, Any]]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ValueError("the body's lists must hold objects")
    return value


def _route(fields: Fields, body: bytes) -> Iterator[Need]:
    topic = fields.get("topic")
    if topic == AUTO_CREATE_TOPIC:
        yield Need("topic", topic, create=True)
    else:
        yield from _topic(topic, ANY)


def _optional_group(key: str) -> Callable[[Fields, bytes], Iterator[Need]]:
    def needs(fields: Fields, body: bytes) -> Iterator[Need]:
        if fields.get(key):
            yield from _group(fields[key])
    return needs


def _consume_stats(fields: Fields, body: bytes) -> Iterator[Need]:
    yield from _group(fields.get("consumerGroup"))
    if fields.get("topic"):
        yield Need("topic", fields["topic"], ANY)


def _end_transaction(fields: Fields, body: bytes) -> Iterator[Need]:
    if fields.get("topic"):
        yield Need("topic", fields["topic"], PUB)


def _fixed(*needs: Need) -> Callable[[Fields, bytes], Iterator[Need]]:
    return lambda fields, body: iter(needs)


def _any_topic(fields: Fields, body: bytes) -> Iterator[Need]:
    return _topic(fields.get("topic"), ANY)


_AUTH_ONLY = _fixed()
_RULES: dict[int, Callable[[Fields, bytes], Iterator[Need]]] = {
    RC.SEND_MESSAGE: _send("topic", "producerGroup"),
    RC.SEND_MESSAGE_V2: _send("b", "a"), RC.SEND_BATCH_MESSAGE: _send("b", "a"),
    RC.PULL_MESSAGE: _topic_and_group, 361: _topic_and_group,  # LITE_PULL_MESSAGE
    RC.QUERY_CONSUMER_OFFSET: _topic_and_group,
    RC.UPDATE_CONSUMER_OFFSET: _topic_and_group, RC.CONSUMER_SEND_MSG_BACK: _send_back,
    RC.QUERY_MESSAGE: lambda fields, body: _topic(fields.get("topic"), SUB),
    RC.VIEW_MESSAGE_BY_ID: _view, RC.GET_MAX_OFFSET: _any_topic, RC.GET_MIN_OFFSET: _any_topic,
    RC.SEARCH_OFFSET_BY_TIMESTAMP: _any_topic, RC.GET_EARLIEST_MSG_STORETIME: _any_topic,
    RC.HEART_BEAT: _heartbeat, RC.UNREGISTER_CLIENT: _optional_group("consumerGroup"),
    RC.GET_CONSUMER_LIST_BY_GROUP: lambda fields, body: _group(fields.get("consumerGroup")),
    RC.LOCK_BATCH_MQ: _locks, RC.UNLOCK_BATCH_MQ: _locks, RC.END_TRANSACTION: _end_transaction,
    RC.GET_ROUTEINFO_BY_TOPIC: _route, RC.GET_BROKER_CLUSTER_INFO: _AUTH_ONLY,
    RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _AUTH_ONLY, 224: _AUTH_ONLY,  # GET_TOPICS_BY_CLUSTER
    101: _AUTH_ONLY, 219: _AUTH_ONLY,  # GET_KV_CONFIG, GET_KVLIST_BY_NAMESPACE
    RC.UPDATE_AND_CREATE_TOPIC: lambda fields, body: iter(
        (Need("topic", fields.get("topic") or "", create=True, even_if_exists=True),)),
    RC.GET_TOPIC_STATS_INFO: _any_topic, RC.QUERY_TOPIC_CONSUME_BY_WHO: _any_topic,
    351: _any_topic,  # GET_TOPIC_CONFIG
    RC.GET_CONSUME_STATS: _consume_stats,
    RC.GET_CONSUMER_CONNECTION_LIST: lambda fields, body: _group(fields.get("consumerGroup")),
    RC.GET_BROKER_RUNTIME_INFO: _AUTH_ONLY,
}


__all__ = ["Need", "RemotingAccess", "needs_of"]
