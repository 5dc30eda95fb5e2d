"""``postbox broker start``: run the network broker (gRPC and RocketMQ remoting) over a store
until SIGTERM/SIGINT.

The store is opened with a ``storage_engine.Broker`` (its persist and delay services run), the
``BrokerServer`` binds ``--listen`` (loopback by default; port 0 picks a free port) and one
line ``listening on HOST:PORT`` goes to stdout once clients can connect (then
``ha listening on HOST:PORT`` when ``--ha-listen`` opened a master's replication port).
SIGTERM or SIGINT stops it cleanly: new calls are refused, long polls end, running calls get
``--grace`` seconds, then the broker closes (consumer offsets persisted, store closed without
``abort``) and the command exits 0 after printing ``stopped``. The remoting side
(``broker_node.remoting_node.RemotingNode``, options in ``broker_remoting``; both composed by
``broker_node.node.BrokerNode``) serves beside it: the
broker on ``--remoting-listen`` (``remoting listening on HOST:PORT``, after the ``ha
listening`` line), the name server on ``--namesrv-listen`` (``namesrv listening on
HOST:PORT``), and registrations with ``--namesrv``; it stops (unregistered, connections closed,
held pulls dropped) before the gRPC server. ``--acl`` guards every listener.

grpc and the RocketMQ protocol modules are imported only when the command runs (the
``server`` extra). ``store_config`` builds the ``StoreConfig`` from the options in one place,
so options that change the store configuration are added there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from postbox.storage_engine import Broker, BrokerRole, ConfigError, StoreConfig

from .broker_limits import check_descriptor_limit, connection_capacity, raise_descriptor_limit
from .broker_metrics import MetricsOption, start_metrics
from .broker_remoting import (
    DEFAULT_HEARTBEAT_MAX_GROUPS,
    DEFAULT_HEARTBEAT_MAX_SUBSCRIPTIONS,
    DEFAULT_NAMESRV_LISTEN,
    AdvertiseOption,
    BrokerNameOption,
    ClusterNameOption,
    HeartbeatGroupsOption,
    HeartbeatSubscriptionsOption,
    NamesrvListenOption,
    NamesrvOption,
    RegistrantsOption,
    RemotingListenOption,
    RequestLimitOptions,
    node_options,
    store_host,
)
from .common import (
    BrokerConfOption,
    CliError,
    SegmentSizeOption,
    StoreDirOption,
    StoreOptions,
    build_config,
    print_note,
    reports_errors,
)
from .console_command import ConsoleListenOption, ConsoleTokenOption, start_console_beside

if TYPE_CHECKING:  # grpc is an optional extra: imported when the broker starts
    from postbox.broker_node.node import BrokerNode

DEFAULT_LISTEN = "127.0.0.1:8081"
SIGNAL_CHECK_S = 0.5
"""How often the waiting main thread wakes: a SIGTERM the kernel delivers to another thread
only sets a flag, and its Python handler runs once the main thread runs bytecode again (a wait
without a timeout may never return; CI once saw a broker ignore SIGTERM for 30 s)."""

broker_app = typer.Typer(name="broker", help="Run the network broker (RocketMQ remoting and "
                                             "RocketMQ 5 gRPC).", no_args_is_help=True)

ListenOption = Annotated[str, typer.Option(
    "--listen", metavar="HOST:PORT",
    help="Address to serve on (port 0: any free port; the bound address is printed).")]
AclOption = Annotated[Path | None, typer.Option(
    "--acl", metavar="FILE", exists=True, dir_okay=False, readable=True,
    help="JSON file of access keys and their rights (docs/remoting.md); without it every "
         "caller is trusted.")]
WorkersOption = Annotated[int, typer.Option(
    "--workers", min=4, help="Most calls served at once (each Telemetry stream and each "
                             "long-polling receive holds one).")]
MaxRequestOption = Annotated[int | None, typer.Option(
    "--max-request-bytes", min=1024, help="Largest request accepted \\[default: the store's "
                                          "max message size + 1 MiB].")]
GraceOption = Annotated[float, typer.Option(
    "--grace", min=0.0, help="Seconds running calls get to finish at shutdown.")]
RoleOption = Annotated[BrokerRole | None, typer.Option(
    "--role", case_sensitive=False,
    help="Replication role (docs/replication.md) \\[default: brokerRole of --broker-conf, "
         "else ASYNC_MASTER].")]
HAListenOption = Annotated[str | None, typer.Option(
    "--ha-listen", metavar="HOST:PORT",
    help="Master: address slaves replicate from (port 0: any free port; printed).")]
MasterHAOption = Annotated[str | None, typer.Option(
    "--master-ha", metavar="HOST:PORT", help="Slave: the master's --ha-listen address.")]
SlaveTimeoutOption = Annotated[int | None, typer.Option(
    "--slave-timeout-ms", min=1,
    help="SYNC_MASTER: longest a send waits for the slave's acknowledgement \\[default: 3000].")]


@dataclasses.dataclass(frozen=True)
class ReplicationOptions:
    """The replication flags of ``broker start``; None leaves the broker.conf (or default) value."""

    role: BrokerRole | None = None
    ha_listen: str | None = None
    master_ha: str | None = None
    slave_timeout_ms: int | None = None


def store_config(store: Path | None, broker_conf: Path | None, segment_size: int | None,
                 replication: ReplicationOptions = ReplicationOptions()) -> StoreConfig:
    """The store configuration of ``broker start``: ``--broker-conf`` via
    ``StoreConfig.from_broker_conf``, then the flags, which win (``--store`` for the root
    directory, the replication flags for role and HA addresses)."""
    config = build_config(StoreOptions(store, broker_conf, segment_size))
    ha_changes: dict[str, Any] = {name: value for name, value in (
        ("ha_listen", replication.ha_listen), ("master_address", replication.master_ha),
        ("slave_timeout_ms", replication.slave_timeout_ms)) if value is not None}
    try:
        ha = dataclasses.replace(config.ha, **ha_changes)
    except ConfigError as error:
        raise CliError(str(error)) from error
    return config.replace(broker_role=replication.role or config.broker_role, ha=ha)


@broker_app.command("start")
@reports_errors
def start_command(store: StoreDirOption = None, listen: ListenOption = DEFAULT_LISTEN,
                  acl: AclOption = None, broker_conf: BrokerConfOption = None,
                  segment_size: SegmentSizeOption = None, workers: WorkersOption = 128,
                  max_request_bytes: MaxRequestOption = None,
                  grace: GraceOption = 5.0, role: RoleOption = None,
                  ha_listen: HAListenOption = None, master_ha: MasterHAOption = None,
                  slave_timeout_ms: SlaveTimeoutOption = None,
                  remoting_listen: RemotingListenOption = None,
                  namesrv_listen: NamesrvListenOption = DEFAULT_NAMESRV_LISTEN,
                  namesrv: NamesrvOption = None, advertise: AdvertiseOption = None,
                  broker_name: BrokerNameOption = None, cluster_name: ClusterNameOption = None,
                  heartbeat_max_groups: HeartbeatGroupsOption = DEFAULT_HEARTBEAT_MAX_GROUPS,
                  heartbeat_max_subscriptions: HeartbeatSubscriptionsOption =
                  DEFAULT_HEARTBEAT_MAX_SUBSCRIPTIONS,
                  namesrv_registrants: RegistrantsOption = None,
                  metrics: MetricsOption = None, console: ConsoleListenOption = None,
                  console_write_token: ConsoleTokenOption = None) -> None:
    """Serve a store over RocketMQ's remoting protocol (name server and broker) and RocketMQ
    5 gRPC until SIGTERM."""
    try:  # imported here: grpc is an optional extra, and other commands start faster
        from postbox.broker_node.grpc_v2 import ServerError
        from postbox.broker_node.node import BrokerNode, BrokerNodeOptions
        from postbox.broker_node.remoting_node import NodeError
    except ImportError as error:
        raise CliError(f"the broker server needs the 'server' extra "
                       f"(pip install 'postbox[server]'): {error}") from error
    limits = RequestLimitOptions(heartbeat_max_groups, heartbeat_max_subscriptions,
                                 namesrv_registrants)
    options = BrokerNodeOptions(
        node_options(broker_conf, namesrv_listen=namesrv_listen, remoting_listen=remoting_listen,
                     namesrv=namesrv, advertise=advertise, broker_name=broker_name,
                     cluster_name=cluster_name, limits=limits),
        grpc_listen=listen, acl=acl, workers=workers, max_request_bytes=max_request_bytes)
    config = store_config(store, broker_conf, segment_size,
                          ReplicationOptions(role, ha_listen, master_ha, slave_timeout_ms))
    try:  # before the store opens and takes the advertised address as its store host
        grpc_access = BrokerNode.check(options)
    except (NodeError, ServerError) as error:
        raise CliError(str(error)) from error
    config = config.replace(store_host=store_host(options.remoting))
    raise_descriptor_limit()
    with _stop_on_signals() as stop, Broker.open(config) as broker:
        try:
            node = BrokerNode(broker, options, grpc_access=grpc_access)
        except (NodeError, ServerError) as error:
            raise CliError(str(error)) from error
        check_descriptor_limit(broker, connection_capacity(node.remoting))
        try:
            _serve(broker, node, stop, (metrics, console, console_write_token), note=(
                f"store {config.root_dir}; role {config.broker_role.value}; "
                f"access control {'from ' + str(acl) if acl else 'off'}; SIGTERM stops"))
        finally:
            node.stop(grace)
    typer.echo("stopped")


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """An event that SIGTERM and SIGINT set while the block runs (their handlers restored
    after it)."""
    stop = threading.Event()
    previous = {number: signal.signal(number, lambda *_: stop.set())
                for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _serve(broker: Broker, broker_node: BrokerNode, stop: threading.Event,
           extras: tuple[str | None, str | None, str | None], note: str) -> None:
    """Start the broker node (and the metrics endpoint and the console: ``extras`` = (metrics
    address, console address, console write token)), print the addresses, wait for SIGTERM."""
    from postbox.broker_node.grpc_v2 import ServerError
    node = broker_node.remoting
    metrics, console, console_write_token = extras
    try:
        broker_node.start()  # the gRPC server, then the remoting node
    except ServerError as error:
        raise CliError(str(error)) from error
    except OSError as error:
        raise CliError(f"cannot serve remoting ({node.options.remoting_listen}, name server "
                       f"{node.options.namesrv_listen}): {error}") from error
    typer.echo(f"listening on {broker_node.grpc.address}")
    ha_address = broker.store.ha_listen_address
    if ha_address is not None:
        typer.echo(f"ha listening on {ha_address[0]}:{ha_address[1]}")
    typer.echo(f"remoting listening on {node.broker_server.server.address_text}")
    if node.namesrv_address is not None:
        typer.echo(f"namesrv listening on {node.namesrv_address}")
    metrics_server = None if metrics is None else start_metrics(metrics, broker, node)
    console_server = None
    try:
        if console is not None:
            console_server = start_console_beside(console, broker, broker.store.root_dir,
                                                  console_write_token)
        identity = node.identity
        assert identity is not None  # set by start
        print_note(f"broker {identity.broker_name} of cluster {identity.cluster} at "
                   f"{identity.address}" + "".join(
                       f"; registering with {host}:{port} every 30 s"
                       for host, port in node.options.namesrv_addresses))
        print_note(note)
        while not stop.wait(SIGNAL_CHECK_S):
            pass  # a Python signal handler runs only when the main thread runs bytecode
    finally:
        if console_server is not None:
            console_server.stop()
        if metrics_server is not None:
            metrics_server.stop()


__all__ = ["ReplicationOptions", "broker_app", "store_config"]
