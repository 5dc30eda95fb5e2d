"""The lab itself: the session's Apache RocketMQ answers the official clients (remoting and gRPC).

If this fails, every other lab test fails the same way; read this one's message first.
"""

from __future__ import annotations

import base64

TOPIC = "LabSmoke"


def test_remoting_and_grpc_clients_round_trip_through_the_live_broker(live_rocketmq):
    lab = live_rocketmq
    lab.driver.run("create-topic", broker_addr=lab.broker.address, topic=TOPIC, queues=2,
                   message_type="NORMAL")
    sent = lab.driver.run("produce", sends=[
        {"message": {"topic": TOPIC, "tags": "a", "keys": ["k1", "k 2"],
                     "properties": {"colour": "grün"}, "body": "héllo ✓"}},
        {"batch": [{"topic": TOPIC, "body": "one"}, {"topic": TOPIC, "body": "two"}]},
    ])
    assert [result["status"] for result in sent] == ["SEND_OK", "SEND_OK"]
    grpc_sent = lab.driver.run("grpc-produce", endpoints=lab.proxy_endpoint, topic=TOPIC,
                               messages=[{"tags": "g", "keys": ["gk"], "body": "через gRPC"}])

    pulled = lab.driver.run("pull", topics=[TOPIC])["messages"]
    bodies = sorted(base64.b64decode(m["body_b64"]).decode() for m in pulled)
    assert bodies == sorted(["héllo ✓", "one", "two", "через gRPC"])
    first = next(m for m in pulled if m["tags"] == "a")
    assert first["keys"] == "k1 k 2" and first["properties"]["colour"] == "grün"
    assert first["uniq_key"] == sent[0]["msg_id"]
    assert first["offset_msg_id"] == sent[0]["offset_msg_id"]
    assert first["store_host"] == lab.broker.address

    received = lab.driver.run("grpc-receive", endpoints=lab.proxy_endpoint, group="lab-smoke",
                              topic=TOPIC, expect=4, timeout_ms=60_000)["messages"]
    assert sorted(base64.b64decode(m["body_b64"]).decode() for m in received) == bodies
    assert grpc_sent[0]["message_id"] in {m["message_id"] for m in received}
    print(f"lab start-up seconds: {lab.startup_s}")
