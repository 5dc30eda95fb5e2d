"""The name server's bodies on the wire: routes, cluster info, topic lists, registrations.

Shapes (``reference/rocketmq-remoting.md`` §2.5, §4)::

    TopicRouteData  {"brokerDatas":[{"brokerAddrs":{"0":"ip:port"},"brokerName":..,"cluster":..,
                      "enableActingMaster":false}],"filterServerTable":{},
                     "queueDatas":[{"brokerName":..,"perm":6,"readQueueNums":4,
                      "topicSysFlag":0,"writeQueueNums":4}]}
    ClusterInfo     {"brokerAddrTable":{name: BrokerData},"clusterAddrTable":{cluster:[names]}}
    TopicList       {"topicList":[..]}
    RegisterBrokerBody {"topicConfigSerializeWrapper":{"topicConfigTable":{..},
                        "dataVersion":{..}},"filterServerList":[]}

A route goes out as standard JSON (``"0"`` quoted) to clients of version ≥ V4_9_4 or that ask
for it (``acceptStandardJsonOnly``), else in fastjson's default form with the broker ids
unquoted (``{0:"ip:port"}``), as Apache's name server answers old clients. Java reads quoted
number keys, so cluster info is always standard JSON.

Pure; safe from any thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from postbox.network.protocol import fastjson
from postbox.storage_engine.formats.fastjson import FastjsonError

from .route_table import BrokerData, QueueData, Route

TOPIC_FILTER_TYPE = "SINGLE_TAG"


def broker_data_json(data: BrokerData) -> dict[str, Any]:
    """``BrokerData`` with integer broker ids as map keys (written per dialect later)."""
    document: dict[str, Any] = {
        "brokerAddrs": {broker_id: address for broker_id, address in
                        sorted(data.addresses.items())},
        "brokerName": data.broker_name, "cluster": data.cluster, "enableActingMaster": False,
    }
    if data.zone_name is not None:
        document["zoneName"] = data.zone_name
    return document


def queue_data_json(data: QueueData) -> dict[str, Any]:
    """``QueueData`` (5.x spelling ``topicSysFlag``)."""
    return {"brokerName": data.broker_name, "perm": data.perm,
            "readQueueNums": data.read_queue_nums, "topicSysFlag": data.topic_sys_flag,
            "writeQueueNums": data.write_queue_nums}


def route_body(route: Route, *, standard_json: bool) -> bytes:
    """A ``TopicRouteData`` body; ``standard_json`` False writes fastjson's unquoted ids."""
    document = {"brokerDatas": [broker_data_json(data) for data in route.broker_datas],
                "filterServerTable": {},
                "queueDatas": [queue_data_json(data) for data in route.queue_datas]}
    return dumps(document, standard_json=standard_json)


def cluster_body(brokers: Mapping[str, BrokerData], clusters: Mapping[str, list[str]]
                 ) -> bytes:
    """A ``ClusterInfo`` body."""
    return dumps({"brokerAddrTable": {name: broker_data_json(data)
                                      for name, data in sorted(brokers.items())},
                  "clusterAddrTable": {name: sorted(members)
                                       for name, members in sorted(clusters.items())}},
                 standard_json=True)


def topic_list_body(topics: list[str]) -> bytes:
    """A ``TopicList`` body."""
    return dumps({"topicList": topics}, standard_json=True)


def kv_table_body(table: Mapping[str, str]) -> bytes:
    """A ``KVTable`` body."""
    return dumps({"table": dict(sorted(table.items()))}, standard_json=True)


def dumps(document: Any, *, standard_json: bool) -> bytes:
    """Compact JSON; integer map keys quoted (standard) or bare (fastjson's default)."""
    if standard_json:
        return fastjson.json_utf8(json.dumps(document, separators=(",", ":"),
                                             ensure_ascii=False))
    return fastjson.json_utf8("".join(_bare_number_keys(document)))


def _bare_number_keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        parts = ["{"]
        for index, (key, item) in enumerate(value.items()):
            parts.append("," if index else "")
            is_number = isinstance(key, int) and not isinstance(key, bool)
            parts += [str(key) if is_number else json.dumps(str(key), ensure_ascii=False), ":"]
            parts += _bare_number_keys(item)
        return [*parts, "}"]
    if isinstance(value, list | tuple):
        parts = ["["]
        for index, item in enumerate(value):
            parts.append("," if index else "")
            parts += _bare_number_keys(item)
        return [*parts, "]"]
    return [json.dumps(value, ensure_ascii=False)]


def topic_config_json(name: str, data: QueueData, *, order: bool = False,
                      topic_filter_type: str = TOPIC_FILTER_TYPE) -> dict[str, Any]:
    """One ``TopicConfig`` of a ``topicConfigTable`` (fastjson's sorted field order)."""
    return {"attributes": {}, "order": order, "perm": data.perm,
            "readQueueNums": data.read_queue_nums, "topicFilterType": topic_filter_type,
            "topicName": name, "topicSysFlag": data.topic_sys_flag,
            "writeQueueNums": data.write_queue_nums}


def register_body(topics: Mapping[str, QueueData], data_version: Mapping[str, int]) -> bytes:
    """A ``RegisterBrokerBody`` (uncompressed) for REGISTER_BROKER."""
    table = {name: topic_config_json(name, data) for name, data in sorted(topics.items())}
    return dumps({"filterServerList": [],
                  "topicConfigSerializeWrapper": {"dataVersion": dict(data_version),
                                                  "topicConfigTable": table}},
                 standard_json=True)


class BodyError(ValueError):
    """A body that does not have the shape its request code needs."""


def parse_register_body(body: bytes, broker_name: str) -> tuple[dict[str, QueueData],
                                                                dict[str, Any]]:
    """(topic → ``QueueData``, dataVersion) of a ``RegisterBrokerBody``."""
    try:
        document = fastjson.loads(body) if body else {}
    except (FastjsonError, UnicodeDecodeError, ValueError) as error:
        raise BodyError(f"RegisterBrokerBody does not parse: {error}") from None
    wrapper = document.get("topicConfigSerializeWrapper") if isinstance(document, dict) else None
    wrapper = wrapper if isinstance(wrapper, dict) else {}
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise BodyError("RegisterBrokerBody: topicConfigTable is not an object")
    topics = {}
    for name, config in table.items():
        if not isinstance(name, str) or not isinstance(config, dict):
            raise BodyError(f"RegisterBrokerBody: topic entry {name!r} is not an object")
        topics[name] = QueueData(broker_name, _int(config, "readQueueNums", name),
                                 _int(config, "writeQueueNums", name),
                                 _int(config, "perm", name),
                                 _int(config, "topicSysFlag", name, default=0))
    version = wrapper.get("dataVersion")
    return topics, version if isinstance(version, dict) else {}


def _int(config: Mapping[str, Any], key: str, topic: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise BodyError(f"RegisterBrokerBody: topic {topic!r} has {key}={value!r}, not an int")
    return value


__all__ = ["BodyError", "cluster_body", "kv_table_body", "parse_register_body",
           "register_body", "route_body", "topic_config_json", "topic_list_body"]
