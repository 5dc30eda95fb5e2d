"""The remoting options of ``postbox broker start``: where the name server and the broker
listen, who the broker is, which external name servers it registers with.

``node_options`` builds the ``NodeOptions`` of ``broker_node.remoting_node.RemotingNode`` from the
flags, falling back to the RocketMQ keys of ``--broker-conf`` a RocketMQ operator already has
(``brokerName``, ``brokerClusterName``, ``namesrvAddr``, ``listenPort``, ``brokerIP1``), then to
the defaults. Flags win. The listeners' bounds come from the ``remoting*`` keys of
``--broker-conf`` (``SERVER_LIMIT_KEYS``). A ``--remoting-listen`` port 0 is resolved to a
free port here, before the store opens, because the broker's address is also its **store
host**: every record and offsetMsgId carries it, and clients (``mqadmin queryMsgById``)
connect to the address an offsetMsgId names. ``store_host`` gives that address (IPv4, as
the record layout wants). Pure apart from reading the broker.conf file and asking the system
for a free port.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from postbox.storage_engine.broker_conf import parse_properties

from .common import CliError

if TYPE_CHECKING:  # the network package is imported only when the broker starts
    from postbox.broker_node.remoting_node import NodeOptions
    from postbox.broker_node.server import ServerLimits

DEFAULT_NAMESRV_LISTEN = "127.0.0.1:9876"
DEFAULT_REMOTING_LISTEN = "127.0.0.1:10911"
DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_BROKER_NAME = "postbox-broker"
NO_NAMESRV = "none"

NamesrvListenOption = Annotated[str, typer.Option(
    "--namesrv-listen", metavar="HOST:PORT",
    help="Address of the embedded name server (rocketmq://HOST:PORT; port 0: any free port, "
         f"printed; '{NO_NAMESRV}': no name server).")]
RemotingListenOption = Annotated[str | None, typer.Option(
    "--remoting-listen", metavar="HOST:PORT",
    help="Address of the RocketMQ remoting broker (RocketMQ 4.x clients, mqadmin, "
         "rocketmq://; port 0: any free port, printed) \\[default: 127.0.0.1:listenPort of "
         f"--broker-conf, else {DEFAULT_REMOTING_LISTEN}].")]
NamesrvOption = Annotated[str | None, typer.Option(
    "--namesrv", metavar="HOST:PORT[;HOST:PORT]",
    help="External name servers (Apache RocketMQ's too) to register this broker with every "
         "30 s \\[default: namesrvAddr of --broker-conf, else none].")]
AdvertiseOption = Annotated[str | None, typer.Option(
    "--advertise", metavar="HOST:PORT",
    help="Broker address routes name (needed with a 0.0.0.0 --remoting-listen) \\[default: "
         "brokerIP1 of --broker-conf with the bound port, else the bound address].")]
BrokerNameOption = Annotated[str | None, typer.Option(
    "--broker-name", help="Broker name in routes \\[default: brokerName of --broker-conf, "
                          f"else {DEFAULT_BROKER_NAME}].")]
ClusterNameOption = Annotated[str | None, typer.Option(
    "--cluster-name", help="Cluster name in routes \\[default: brokerClusterName of "
                           f"--broker-conf, else {DEFAULT_CLUSTER}].")]
HeartbeatGroupsOption = Annotated[int, typer.Option(
    "--heartbeat-max-groups", min=1,
    help="Most consumer groups (and producer groups) one client heartbeat may name; a "
         "heartbeat over it is refused whole.")]
HeartbeatSubscriptionsOption = Annotated[int, typer.Option(
    "--heartbeat-max-subscriptions", min=1,
    help="Most subscriptions (topics) of all the consumer groups of one heartbeat.")]
RegistrantsOption = Annotated[str | None, typer.Option(
    "--namesrv-registrants", metavar="HOST[,HOST]|*",
    help="Hosts other brokers may register with the embedded name server from ('*': any; a "
         "registration can take over routes, docs/remoting.md) \\[default: none; with --acl, "
         "admin-signed registrations].")]
DEFAULT_HEARTBEAT_MAX_GROUPS = 256
DEFAULT_HEARTBEAT_MAX_SUBSCRIPTIONS = 4096


@dataclass(frozen=True)
class RequestLimitOptions:
    """The request-level limits of the remoting side (heartbeats, name-server registrants)."""

    heartbeat_max_groups: int = DEFAULT_HEARTBEAT_MAX_GROUPS
    heartbeat_max_subscriptions: int = DEFAULT_HEARTBEAT_MAX_SUBSCRIPTIONS
    namesrv_registrants: str | None = None


def _registrants(text: str | None) -> frozenset[str]:
    return frozenset(host.strip().strip("[]") for host in (text or "").split(",")
                     if host.strip())


def _conf_keys(broker_conf: Path | None) -> dict[str, str]:
    if broker_conf is None:
        return {}
    try:
        return parse_properties(broker_conf.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read --broker-conf {broker_conf}: {error}") from error


if TYPE_CHECKING:
    from postbox.broker_node.remoting_node import NodeOptions


def node_options(broker_conf: Path | None, *, namesrv_listen: str,
                 remoting_listen: str | None, namesrv: str | None, advertise: str | None,
                 broker_name: str | None, cluster_name: str | None,
                 limits: RequestLimitOptions = RequestLimitOptions()) -> NodeOptions:
    """The ``NodeOptions`` of the flags and ``--broker-conf`` (``CliError`` when invalid)."""
    from postbox.broker_node.registration import parse_namesrv_list
    from postbox.broker_node.remoting_node import NodeOptions
    from postbox.broker_node.server.broker import HeartbeatLimits
    conf = _conf_keys(broker_conf)
    if remoting_listen is None:
        port = conf.get("listenPort", "").strip()
        remoting_listen = f"127.0.0.1:{port}" if port else DEFAULT_REMOTING_LISTEN
    remoting_listen = _resolve_port(remoting_listen)
    namesrv = namesrv if namesrv is not None else conf.get("namesrvAddr", "").strip() or None
    try:
        addresses = parse_namesrv_list(namesrv) if namesrv else []
    except ValueError as error:
        raise CliError(f"--namesrv: {error}") from error
    if advertise is None and conf.get("brokerIP1", "").strip():
        advertise = f"{conf['brokerIP1'].strip()}:{remoting_listen.rpartition(':')[2]}"
    return NodeOptions(
        limits=server_limits(conf),
        remoting_listen=remoting_listen,
        namesrv_listen=None if namesrv_listen.strip().lower() == NO_NAMESRV else namesrv_listen,
        advertise=advertise,
        cluster=cluster_name or conf.get("brokerClusterName", "").strip() or DEFAULT_CLUSTER,
        broker_name=broker_name or conf.get("brokerName", "").strip() or DEFAULT_BROKER_NAME,
        namesrv_addresses=addresses,
        namesrv_registrants=_registrants(limits.namesrv_registrants),
        heartbeat_limits=HeartbeatLimits(limits.heartbeat_max_groups,
                                         limits.heartbeat_max_subscriptions))


SERVER_LIMIT_KEYS = {
    "remotingMaxConnections": "max_connections",
    "remotingMaxConnectionsPerPeer": "max_connections_per_peer",
    "remotingReservedConnections": "reserved_connections",
    "remotingProbationTimeoutMillis": "probation_timeout_ms",
    "remotingFrameReadTimeoutMillis": "frame_read_timeout_ms",
    "remotingMaxOutputBytes": "max_output_bytes",
    "remotingMaxOwedAnswers": "max_owed_answers",
    "remotingIdleTimeoutMillis": "idle_timeout_ms",
}
"""broker.conf keys of the remoting listeners' bounds → ``ServerLimits`` fields."""


def server_limits(conf: dict[str, str]) -> ServerLimits:
    """The ``ServerLimits`` of the ``remoting*`` keys of ``--broker-conf`` (defaults for the
    others); ``CliError`` naming the key when a value is not a valid whole number."""
    from postbox.broker_node.server import ServerLimits
    values: dict[str, Any] = {}
    for key, name in SERVER_LIMIT_KEYS.items():
        text = conf.get(key, "").strip()
        if not text:
            continue
        if not text.isdigit():
            raise CliError(f"--broker-conf {key}={text!r}: not a whole number")
        values[name] = int(text)
    try:
        return ServerLimits(**values)
    except ValueError as error:
        raise CliError(f"--broker-conf remoting limits: {error}") from error


def _resolve_port(listen: str) -> str:
    """``host:0`` → ``host:<a free port>`` (the listener binds it a moment later)."""
    host, _, port = listen.rpartition(":")
    if port != "0":
        return listen
    try:
        with socket.create_server((host.strip("[]"), 0)) as probe:
            return f"{host}:{probe.getsockname()[1]}"
    except OSError as error:
        raise CliError(f"--remoting-listen {listen}: {error}") from error


def store_host(options: NodeOptions) -> str:
    """The ``ip:port`` written into records and offsetMsgIds: the advertised broker address
    (its host resolved to an IPv4 address), else the listen address."""
    host, _, port = (options.advertise or options.remoting_listen).rpartition(":")
    if port == "0":
        port = options.remoting_listen.rpartition(":")[2]
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            host = socket.gethostbyname(host)
        except OSError as error:
            raise CliError(f"--advertise host {host!r} does not resolve: {error}") from error
    return f"{host}:{port}"


__all__ = ["SERVER_LIMIT_KEYS", "AdvertiseOption", "BrokerNameOption", "ClusterNameOption",
           "HeartbeatGroupsOption", "HeartbeatSubscriptionsOption", "NamesrvListenOption",
           "NamesrvOption", "RegistrantsOption", "RemotingListenOption", "RequestLimitOptions",
           "node_options", "server_limits", "store_host"]
