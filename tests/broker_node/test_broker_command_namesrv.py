"""``postbox broker start`` as an operator runs it: its name server routes to its broker under
the names given (flags or broker.conf), ``--acl`` guards the name server too, one broker
registers with another's name server (``--namesrv``) and leaves it on SIGTERM, and a wildcard
listen without ``--advertise`` is refused before anything is served."""

from __future__ import annotations

import json
import subprocess

import pytest

from bench.remoting_raw import RawRemotingClient, send_fields
from postbox.network.protocol.acl_signature import sign_request
from postbox.network.protocol.codes import RequestCode, ResponseCode
from tests.support.broker_process import POSTBOX, BrokerProcess, write_broker_conf


def _cluster(address: str) -> dict:
    with RawRemotingClient(address) as client:
        return json.loads(client.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)


def test_name_server_routes_to_the_broker_under_its_broker_conf_names(tmp_path):
    conf = write_broker_conf(tmp_path)
    with conf.open("a") as handle:
        handle.write("brokerName=from-conf\nbrokerClusterName=ConfCluster\n")
    server = BrokerProcess(tmp_path / "store", broker_conf=conf).start()
    try:
        cluster = _cluster(server.namesrv_address)
        assert cluster["clusterAddrTable"] == {"ConfCluster": ["from-conf"]}
        assert cluster["brokerAddrTable"]["from-conf"]["brokerAddrs"] == {
            "0": server.remoting_address}
        with RawRemotingClient(server.remoting_address) as broker:
            sent = broker.call(RequestCode.SEND_MESSAGE_V2, send_fields("TN", 0), b"x")
        assert sent.code == 0
        msg_id = sent.ext_fields["msgId"]  # the store host is the broker's own address:
        ip = ".".join(str(int(msg_id[i:i + 2], 16)) for i in range(0, 8, 2))
        assert f"{ip}:{int(msg_id[8:16], 16)}" == server.remoting_address  # mqadmin goes there
        with RawRemotingClient(server.namesrv_address) as namesrv:
            route = namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TN"})
        assert route.code == 0
        assert json.loads(route.body)["queueDatas"][0]["brokerName"] == "from-conf"
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_acl_guards_the_name_server(tmp_path):
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [
        {"access_key": "ops", "secret_key": "ops-secret", "admin": True}]}))
    server = BrokerProcess(tmp_path / "store", acl=acl).start()
    try:
        with RawRemotingClient(server.namesrv_address) as client:
            unsigned = client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
            signed = client.call_command(sign_request(
                client.request(RequestCode.GET_BROKER_CLUSTER_INFO), "ops", "ops-secret"))
        assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark
        assert signed.code == 0
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_broker_registers_with_another_name_server_and_leaves_on_sigterm(tmp_path):
    first = BrokerProcess(tmp_path / "first", extra=(
        "--broker-name", "first", "--namesrv-registrants", "127.0.0.1")).start()
    try:
        second = BrokerProcess(tmp_path / "second", extra=(
            "--broker-name", "second", "--cluster-name", "Other",
            "--namesrv", first.namesrv_address)).start()
        try:
            cluster = _cluster(first.namesrv_address)  # the first round precedes its lines
            assert cluster["clusterAddrTable"]["Other"] == ["second"]
            assert cluster["brokerAddrTable"]["second"]["brokerAddrs"] == {
                "0": second.remoting_address}
        finally:
            assert second.stop() == 0, second.stderr_text()
        assert "second" not in _cluster(first.namesrv_address)["brokerAddrTable"]
    finally:
        assert first.stop() == 0, first.stderr_text()


def test_wildcard_listen_without_advertise_is_refused(tmp_path):
    done = subprocess.run([POSTBOX, "broker", "start", "--store", str(tmp_path / "store"),
                           "--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0",
                           "--remoting-listen", "0.0.0.0:0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--advertise" in done.stderr
    assert "listening" not in done.stdout


def test_node_options_take_flags_then_broker_conf_then_defaults(tmp_path):
    from postbox.cli.broker_remoting import node_options
    from postbox.cli.common import CliError

    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=conf-b\nbrokerClusterName=conf-c\nnamesrvAddr=10.0.0.1:9876;"
                    "10.0.0.2:9876\nlistenPort=10921\nbrokerIP1=10.0.0.7\n")
    flags = dict(namesrv_listen="127.0.0.1:9876", remoting_listen=None, namesrv=None,
                 advertise=None, broker_name=None, cluster_name=None)
    from_conf = node_options(conf, **flags)
    assert (from_conf.broker_name, from_conf.cluster) == ("conf-b", "conf-c")
    assert from_conf.remoting_listen == "127.0.0.1:10921"
    assert from_conf.advertise == "10.0.0.7:10921"
    assert from_conf.namesrv_addresses == [("10.0.0.1", 9876), ("10.0.0.2", 9876)]
    flagged = node_options(conf, **{**flags, "broker_name": "flag-b", "namesrv": "ns:1",
                                     "namesrv_listen": "none", "advertise": "h:2"})
    assert (flagged.broker_name, flagged.cluster) == ("flag-b", "conf-c")
    assert flagged.namesrv_addresses == [("ns", 1)] and flagged.namesrv_listen is None
    assert flagged.advertise == "h:2"
    default = node_options(None, **flags)
    assert (default.broker_name, default.cluster, default.remoting_listen, default.advertise,
            default.namesrv_addresses) == ("postbox-broker", "DefaultCluster",
                                           "127.0.0.1:10911", None, [])
    with pytest.raises(CliError, match="--namesrv"):
        node_options(None, **{**flags, "namesrv": "nohost"})


def test_remoting_limits_come_from_broker_conf_keys_and_bad_ones_name_the_key(tmp_path):
    from postbox.broker_node.server import ServerLimits
    from postbox.cli.broker_remoting import node_options
    from postbox.cli.common import CliError

    flags = dict(namesrv_listen="127.0.0.1:9876", remoting_listen=None, namesrv=None,
                 advertise=None, broker_name=None, cluster_name=None)
    conf = tmp_path / "broker.conf"
    conf.write_text("remotingMaxConnections=300\nremotingMaxConnectionsPerPeer=10\n"
                    "remotingReservedConnections=20\nremotingFrameReadTimeoutMillis=5000\n"
                    "remotingMaxOutputBytes=1048576\nremotingMaxOwedAnswers=50\n"
                    "remotingIdleTimeoutMillis=60000\nremotingProbationTimeoutMillis=700\n")
    limits = node_options(conf, **flags).limits
    assert (limits.max_connections, limits.max_connections_per_peer,
            limits.reserved_connections, limits.frame_read_timeout_ms, limits.max_output_bytes,
            limits.max_owed_answers, limits.idle_timeout_ms, limits.probation_timeout_ms) == (
        300, 10, 20, 5000, 1048576, 50, 60000, 700)
    assert node_options(None, **flags).limits == ServerLimits()
    conf.write_text("remotingMaxConnectionsPerPeer=many\n")
    with pytest.raises(CliError, match="remotingMaxConnectionsPerPeer"):
        node_options(conf, **flags)
    conf.write_text("remotingMaxConnections=10\nremotingReservedConnections=10\n")
    with pytest.raises(CliError, match="reserved_connections"):
        node_options(conf, **flags)
