"""RocketMQ's ``mqadmin`` against any name server, and readers for what it prints.

``Mqadmin(driver).run(["topicList"], ["topicRoute", "-t", "T"], ...)`` runs the lab's
``mqadmin`` (rocketmq-tools 5.3.3's ``MQAdminStartup``, the class behind the distribution's
``bin/mqadmin``) once per command, all in one JVM through the lab driver's ``mqadmin`` command
(``tests/lab/driver/.../Mqadmin.java``), each with ``-n <the driver's name server>`` appended.
A command whose output says ``command failed`` raises ``MqadminError`` with what it printed.

The readers (``topic_list``, ``topic_route``, ``topic_status``, ``consumer_progress``,
``message_details``, ``key_query``, ``cluster_list``, ``broker_status``) turn one command's
printed text into plain Python values; they raise ``MqadminError`` on text they cannot read, so
a changed or broken answer fails loudly instead of parsing as empty.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tests.support.rocketmq_lab import LabDriver


class MqadminError(Exception):
    """mqadmin reported a failure, or printed something its reader cannot parse."""


@dataclass(frozen=True)
class MqadminOutput:
    """One command: its arguments and what it printed on stdout and stderr."""

    args: list[str]
    out: str
    err: str


@dataclass(frozen=True)
class Mqadmin:
    """Runs mqadmin commands against the driver's name server."""

    driver: LabDriver

    def run(self, *commands: list[str]) -> list[MqadminOutput]:
        """Every command in one JVM, in order; ``MqadminError`` if any of them failed."""
        asked = [[*command, "-n", self.driver.namesrv] for command in commands]
        outputs = [MqadminOutput(r["args"], r["out"], r["err"])
                   for r in self.driver.run("mqadmin", commands=asked)]
        for output in outputs:
            text = output.out + output.err
            if "command failed" in text or "Missing required option" in text:
                raise MqadminError(f"mqadmin {' '.join(output.args)}:\n{text[-3000:]}")
        return outputs


def topic_list(out: str) -> set[str]:
    """``topicList``: one topic name a line."""
    return {line.strip() for line in out.splitlines() if line.strip()}


def topic_route(out: str) -> dict:
    """``topicRoute -t T``: the route as JSON (fastjson prints broker ids as bare number keys)."""
    quoted = re.sub(r"([{,]\s*)(-?\d+):", r'\1"\2":', out)
    try:
        return json.loads(quoted)
    except json.JSONDecodeError as error:
        raise MqadminError(f"topicRoute printed no route: {out[-2000:]!r}") from error


def _table(out: str, header: str) -> list[list[str]]:
    """The whitespace-separated rows after the ``#``-prefixed header line starting with
    ``header``, up to the first blank line."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        raise MqadminError(f"no {header!r} table in: {out[-2000:]!r}")
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def topic_status(out: str) -> list[dict]:
    """``topicStatus -t T``: one row per queue (broker, queue_id, min_offset, max_offset)."""
    return [{"broker": row[0], "queue_id": int(row[1]), "min_offset": int(row[2]),
             "max_offset": int(row[3])} for row in _table(out, "#Broker Name")]


def consumer_progress(out: str) -> list[dict]:
    """``consumerProgress -g G``: one row per queue (topic, broker, queue_id, broker_offset,
    consumer_offset)."""
    return [{"topic": row[0], "broker": row[1], "queue_id": int(row[2]),
             "broker_offset": int(row[3]), "consumer_offset": int(row[4])}
            for row in _table(out, "#Topic")]


def consumer_groups(out: str) -> dict[str, list[str]]:
    """``consumerProgress`` without a group: group name -> the rest of its row."""
    return {row[0]: row[1:] for row in _table(out, "#Group")}


def message_details(out: str) -> dict[str, str]:
    """``queryMsgById`` / ``queryMsgByUniqueKey``: the ``Name: value`` lines of the first message
    printed (``Properties`` stays the printed ``{k=v, ...}`` text; ``properties`` parses it)."""
    fields: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"^([A-Za-z][A-Za-z ]*[A-Za-z]):\s+(.*)$", line)
        if match is None:
            continue
        name, value = match.groups()
        if name in fields:  # a second message begins
            break
        fields[name] = value.strip()
    if "Topic" not in fields:
        raise MqadminError(f"no message in: {out[-2000:]!r}")
    return fields


def properties(printed: str) -> dict[str, str]:
    """A Java map's ``{k=v, k2=v2}`` text (values without ``, `` or ``=``) as a dict."""
    inner = printed.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise MqadminError(f"not a printed map: {printed!r}")
    pairs = [part.split("=", 1) for part in inner[1:-1].split(", ") if part]
    return {key: value for key, value in pairs}


def key_query(out: str) -> list[dict]:
    """``queryMsgByKey``: one row per message found (msg_id = its unique key, queue_id, offset)."""
    return [{"msg_id": row[0], "queue_id": int(row[1]), "queue_offset": int(row[2])}
            for row in _table(out, "#Message ID")]


def cluster_list(out: str) -> list[dict]:
    """``clusterList``: one row per broker (cluster, broker, broker_id, address, version)."""
    return [{"cluster": row[0], "broker": row[1], "broker_id": int(row[2]), "address": row[3],
             "version": row[4]} for row in _table(out, "#Cluster Name")]


def broker_status(out: str) -> dict[str, str]:
    """``brokerStatus -b ADDR``: the broker's runtime table, ``name : value`` a line."""
    table = {}
    for line in out.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip() and " " not in name.strip():
            table[name.strip()] = value.strip()
    if not table:
        raise MqadminError(f"brokerStatus printed no table: {out[-2000:]!r}")
    return table
