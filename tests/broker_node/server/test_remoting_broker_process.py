"""``postbox broker start`` serves the remoting broker on ``--remoting-listen`` beside gRPC: a
raw client sends and pulls through the process; SIGTERM stops it cleanly (exit 0, store
consistent)."""

from __future__ import annotations

from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import StoreConfig, verify_store
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.stored_records import decode_records


def test_broker_process_serves_remoting_and_stops_cleanly(tmp_path):
    conf = write_broker_conf(tmp_path)
    server = BrokerProcess(tmp_path / "store", broker_conf=conf).start()
    try:
        assert server.remoting_address.startswith("127.0.0.1:")
        assert server.remoting_address != server.address
        with RawRemotingClient(server.remoting_address) as client:
            sent = client.call(RequestCode.SEND_MESSAGE_V2, send_fields("TP", 0), b"over tcp")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            pulled = client.call(RequestCode.PULL_MESSAGE,
                                 pull_fields("G", "TP", 0, 0, sys_flag=0x6, suspend_ms=5000))
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            assert [r.body for r in decode_records(pulled.body)] == [b"over tcp"]
    finally:
        code = server.stop()
    assert code == 0, server.stderr_text()
    assert "stopped" in server.stdout_lines()
    assert verify_store(server.store, StoreConfig.from_broker_conf(conf,
                                                                   root_dir=server.store)) == []
