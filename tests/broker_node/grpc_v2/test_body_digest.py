"""The body digest of MessagingService messages, as the official clients of other languages
check it (issue 19, item 6).

The Java client (rocketmq-client-java ``MessageViewImpl.fromProtobuf``) and the Go client
recompute the digest of the received body and compare the checksum *strings* exactly: MD5 and
SHA1 as upper-case hex, CRC32 as ``Long.toHexString(crc).toUpperCase()`` (no leading zeros).
Apache's proxy sends MD5, upper-case hex. ``java_check`` below restates that rule; the second
test runs the real Java client against a broker process.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

from rocketmq.v5.util.misc import Misc

from postbox.broker_node.grpc_v2.conversion import body_digest, message_to_proto
from postbox.broker_node.grpc_v2.protocol import Code, definition
from postbox.storage_engine import Broker, Message, StoreConfig
from tests.broker_node.grpc_v2.java_client import java_digest_check, run_digest_check
from tests.broker_node.grpc_v2.raw_calls import send

KNOWN = {  # body -> MD5 upper-case hex (RFC 1321 test suite values and one binary body)
    b"a": "0CC175B9C0F1B6A831C399E269772661",
    b"abc": "900150983CD24FB0D6963F7D28E17F72",
    b"message digest": "F96B697D7CB7938D525A2F31AAF161D0",
    bytes(range(256)): hashlib.md5(bytes(range(256))).hexdigest().upper(),
}


def java_check(digest: definition.Digest, body: bytes) -> bool:
    """Whether the Java (and Go) client accepts ``digest`` for ``body`` (not corrupted)."""
    if digest.type == definition.CRC32:
        expected = format(zlib.crc32(body), "x").upper()
    elif digest.type == definition.MD5:
        expected = hashlib.md5(body).hexdigest().upper()
    elif digest.type == definition.SHA1:
        expected = hashlib.sha1(body).hexdigest().upper()
    else:
        return True  # unknown types are only logged by the clients
    return digest.checksum == expected


def bodies_with_short_crc(count: int) -> list[bytes]:
    """Bodies whose CRC32 starts with a zero nibble (where zero-padding shows)."""
    found = (f"digest-{index}".encode() for index in range(100_000))
    return [body for body in found if zlib.crc32(body) < 0x1000_0000][:count]


def test_digest_is_md5_upper_case_hex_as_apache_sends_it():
    for body, checksum in KNOWN.items():
        digest = body_digest(body)
        assert (digest.type, digest.checksum) == (definition.MD5, checksum)
        assert java_check(digest, body)
    for body in [*bodies_with_short_crc(20), b"x" * 70_000]:
        assert java_check(body_digest(body), body)
        assert body_digest(body).checksum == Misc.md5_checksum(body)  # the Python client's
    for body in bodies_with_short_crc(3):  # the Python client zero-pads CRC32, Java and Go do
        assert Misc.crc32_checksum(body) != format(zlib.crc32(body), "x").upper()  # not


def test_received_messages_carry_a_digest_the_java_client_accepts(tmp_path: Path):
    bodies = [*bodies_with_short_crc(5), b"plain", bytes(range(256))]
    with Broker.open(StoreConfig(root_dir=tmp_path / "store")) as broker:
        for body in bodies:
            broker.send(Message("digests", body), queue_id=0)
        broker.store.wait_dispatched()
        views = broker.pull("g", "digests", 0, 0, 32).messages
    assert [view.body for view in views] == bodies
    for view in views:
        proto = message_to_proto(view)
        assert proto.body == view.body
        assert java_check(proto.system_properties.body_digest, proto.body), view.body


def test_official_java_client_flags_no_message_as_corrupted(broker_server):
    program = java_digest_check()
    server = broker_server()
    bodies = [*bodies_with_short_crc(6), b"plain body", bytes(range(256)), b"\x00" * 100]
    for body in bodies:
        assert send(server.address, "java-digests", body).status.code == Code.OK
    report = run_digest_check(program, server.address, "java-digests", "java-readers",
                              len(bodies))
    assert report["received"] == len(bodies), report
    assert report["corrupted"] == 0, report
    assert sorted(bytes.fromhex(m["body_hex"]) for m in report["messages"]) == sorted(bodies)
