"""Read-only inspection over remoting: what ``postbox … --broker`` asks beyond ``AdminCalls``.

Each call is the request RocketMQ's ``mqadmin`` makes for the same question, so it works against
a ``postbox broker`` and an Apache RocketMQ cluster alike; nothing is committed or changed:

- ``topic_offsets``: the topic list of the name servers (GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
  ``topicList``) and each topic's queue offsets on every master (GET_TOPIC_STATS_INFO, 202),
  numbered with the framework's global queue ids; a topic no master has is left out.
- ``runtime_info``: GET_BROKER_RUNTIME_INFO (28) of every master (a ``KVTable``).
- ``view_message_by_id``: VIEW_MESSAGE_BY_ID (33) to the store host the offsetMsgId names, as
  ``mqadmin queryMsgById`` does.

Thread safety: stateless apart from the shared context; any thread.
"""

from __future__ import annotations

import json
from typing import Any

from postbox.storage_engine.formats import MessageView, decode_offset_msg_id
from postbox.storage_engine.formats.fastjson import ObjectKey

from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .broker_errors import check_success
from .context import ClientContext
from .errors import RouteNotFoundError


class InspectCalls:
    """Read-only questions to the brokers a name server knows (see the module docstring)."""

    def __init__(self, context: ClientContext) -> None:
        self._context = context

    def topic_offsets(self) -> list[dict[str, Any]]:
        """Every topic with its queues' min/max offsets, sorted (``store topics``'s shape)."""
        answer = self._context.routes.namesrv_call(RemotingCommand.request(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}))
        check_success("topic list", answer, address="the name servers")
        names = json.loads(answer.body or b"{}").get("topicList") or []
        documents: list[dict[str, Any]] = []
        for wire_topic in sorted(names):
            if not self._context.namespace.owns(wire_topic):
                continue
            queues = self._queue_offsets(wire_topic)
            if queues:
                documents.append({"topic": self._context.app_name(wire_topic),
                                  "queues": sorted(queues, key=lambda q: q["queue_id"])})
        return documents

    def _queue_offsets(self, wire_topic: str) -> list[dict[str, Any]]:
        try:
            route = self._context.routes.wire_route(wire_topic)
        except RouteNotFoundError:
            return []
        queues: list[dict[str, Any]] = []
        for address in sorted(route.masters().values()):
            answer = self._context.broker_call(address, RemotingCommand.request(
                RequestCode.GET_TOPIC_STATS_INFO, {"topic": wire_topic}))
            if answer.code != ResponseCode.SUCCESS:
                continue
            table = fastjson.loads(answer.body).get("offsetTable") or {}
            for key, value in table.items():
                if not isinstance(key, ObjectKey):
                    continue
                queue = key.as_dict()
                broker, queue_id = str(queue.get("brokerName")), int(queue.get("queueId", -1))
                try:
                    global_id = route.global_id(broker, queue_id)
                except KeyError:
                    global_id = queue_id
                queues.append({"queue_id": global_id, "min_offset": int(value["minOffset"]),
                               "max_offset": int(value["maxOffset"])})
        return queues

    def runtime_info(self) -> dict[str, dict[str, str]]:
        """Broker name → its runtime table."""
        tables = {}
        for broker, address in sorted(self._context.masters().items()):
            answer = check_success("runtime info", self._context.broker_call(
                address, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})),
                address=address)
            tables[broker] = dict(json.loads(answer.body or b"{}").get("table") or {})
        return tables

    def view_message_by_id(self, msg_id: str) -> MessageView | None:
        """The record an offsetMsgId names, from the store host it names; None if none."""
        host, position = decode_offset_msg_id(msg_id)
        address = str(host)
        answer = self._context.broker_call(address, RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": position}))
        if answer.code != ResponseCode.SUCCESS:
            return None
        views = self._context.decode_records(answer.body, 0)
        return views[0] if views and views[0].msg_id == msg_id.upper() else None
