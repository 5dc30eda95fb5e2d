"""Frames of the remoting protocol: both header forms, bounds, and fastjson's dialect."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode
from postbox.network.protocol.wire import (
    FrameDecoder,
    FrameLimits,
    HeaderFieldError,
    RemotingCommand,
    SerializeType,
    WireError,
    decode,
    encode,
)
from postbox.storage_engine.formats.fastjson import FastjsonError, ObjectKey

# The SEND_MESSAGE_V2 request of reference/rocketmq-remoting.md §1.4, as a Java node frames it.
JAVA_HEADER = (
    b'{"code":310,"extFields":{"a":"PG_demo","b":"TopicTest","c":"TBW102","d":"4","e":"2",'
    b'"f":"0","g":"1726300000000","h":"0","i":"KEYS\\u0001order-1\\u0002TAGS\\u0001TagA\\u0002",'
    b'"j":"0","k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":42,'
    b'"serializeTypeCurrentRPC":"JSON","version":479}'
)

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    ext_fields=st.dictionaries(names.filter(bool), names, max_size=6),
    body=st.binary(max_size=64),
    remark=st.one_of(st.none(), names.filter(bool)),
    language=st.sampled_from(["JAVA", "GO", "PYTHON"]),
    version=st.integers(0, 2**15 - 1),
)


def java_frame(header: bytes, body: bytes, kind: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (kind << 24) | len(header)) + header \
        + body


def test_a_java_json_frame_decodes_field_by_field() -> None:
    (command,) = FrameDecoder().feed(java_frame(JAVA_HEADER, b"hello"))
    assert (command.code, command.opaque, command.language, command.version) == (
        RequestCode.SEND_MESSAGE_V2, 42, "JAVA", 479)
    assert not command.is_response and not command.is_oneway
    assert command.fields.get_str("b") == "TopicTest"
    assert command.fields.get_int("g") == 1726300000000
    assert command.fields.get_bool("k") is False
    assert command.ext_fields["i"] == "KEYS\x01order-1\x02TAGS\x01TagA\x02"
    assert command.body == b"hello"


@given(commands, st.sampled_from(list(SerializeType)))
def test_every_command_round_trips_in_both_header_forms(command: RemotingCommand,
                                                        kind: SerializeType) -> None:
    (decoded,) = FrameDecoder().feed(encode(command, kind))
    assert decoded == command


def test_a_binary_header_is_read_as_the_reference_lays_it_out() -> None:
    key, value = b"topic", b"T"
    table = struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value
    header = struct.pack(">hBhii", 105, 9, 317, 7, 0) + struct.pack(">i", 0) \
        + struct.pack(">i", len(table)) + table
    (command,) = FrameDecoder().feed(java_frame(header, b"", kind=1))
    assert (command.code, command.language, command.version, command.opaque) == (105, "GO",
                                                                                 317, 7)
    assert command.ext_fields == {"topic": "T"} and command.remark is None


def test_frames_split_anywhere_and_joined_decode_the_same() -> None:
    frames = b"".join(encode(RemotingCommand.request(RequestCode.HEART_BEAT, {"n": i},
                                                     bytes(i))) for i in range(20))
    decoder = FrameDecoder()
    out = []
    for at in range(0, len(frames), 7):
        out += decoder.feed(frames[at:at + 7])
    assert [c.fields.get_int("n") for c in out] == list(range(20))
    assert [len(c.body) for c in out] == list(range(20)) and decoder.buffered_bytes == 0


@pytest.mark.parametrize(("frame", "words"), [
    (struct.pack(">i", 2**30), "frame length"),
    (struct.pack(">i", 2), "frame length"),
    (struct.pack(">iI", 8, 100) + b"\0" * 4, "runs past"),
    (java_frame(b"[1,2]", b""), "not an object"),
    (java_frame(b"{nope", b""), "does not parse"),
    (java_frame(b'{"code":"x"}', b""), "int32"),
    (java_frame(b'{"code":1,"extFields":{"a":[1]}}', b""), "not a string"),
    (java_frame(b"{}", b"", kind=7), "serialize type"),
    (java_frame(struct.pack(">hBhii", 1, 0, 1, 1, 0) + struct.pack(">i", 99), b"", kind=1),
     "runs past"),
])
def test_malformed_frames_raise_wire_error(frame: bytes, words: str) -> None:
    with pytest.raises(WireError, match=words):
        FrameDecoder().feed(frame)


def test_limits_bound_frames_headers_and_field_counts() -> None:
    limits = FrameLimits(max_frame_bytes=1024, max_header_bytes=512, max_ext_fields=3)
    big_body = RemotingCommand.request(10, body=bytes(2000))
    with pytest.raises(WireError, match="frame length"):
        FrameDecoder(limits).feed(encode(big_body))
    many = RemotingCommand.request(10, {f"k{i}": "v" for i in range(4)})
    with pytest.raises(WireError, match="header fields"):
        FrameDecoder(limits).feed(encode(many))
    with pytest.raises(WireError, match="header fields"):
        FrameDecoder(limits).feed(encode(many, SerializeType.ROCKETMQ))
    long_header = RemotingCommand.request(10, {"k": "v" * 600})
    with pytest.raises(WireError, match="over the limit"):
        FrameDecoder(limits).feed(encode(long_header))


def test_header_fields_are_checked_by_type_and_name() -> None:
    fields = RemotingCommand.request(11, {"queueId": "x", "offset": 2**64, "t": "y" * 10}).fields
    with pytest.raises(HeaderFieldError, match=r"'queueId'.*not an integer"):
        fields.get_int("queueId")
    with pytest.raises(HeaderFieldError, match="'offset'"):
        fields.get_int("offset")
    with pytest.raises(HeaderFieldError, match="'topic': is required"):
        fields.get_str("topic")
    with pytest.raises(HeaderFieldError, match="over 5"):
        fields.get_str("t", max_chars=5)
    assert fields.get_int("maxMsgNums", 32) == 32
    assert fields.get_str("t") == "y" * 10


def test_a_response_answers_its_request() -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueId": 1}, oneway=True)
    assert request.is_oneway
    response = request.response(19, {"nextBeginOffset": 5, "flag": True}, remark="NO")
    assert response.is_response and response.opaque == request.opaque
    assert response.ext_fields == {"nextBeginOffset": "5", "flag": "true"}
    assert decode(encode(response)[4:]) == response


def test_fastjson_reads_unquoted_number_keys_and_object_keys() -> None:
    route = '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}]}'
    assert fastjson.loads(route)["brokerDatas"][0]["brokerAddrs"] == {
        "0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    stats = ('{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
             '{"brokerOffset":5,"consumerOffset":3}}}')
    table = fastjson.loads(stats.encode())["offsetTable"]
    key = ObjectKey.of(brokerName="b", queueId=0, topic="T")
    assert table == {key: {"brokerOffset": 5, "consumerOffset": 3}}
    assert fastjson.loads(fastjson.dumps({"offsetTable": table})) == {"offsetTable": table}
    assert fastjson.dumps({"offsetTable": table}).startswith(
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:')


@pytest.mark.parametrize("text", ["{0:}", "{{}", "[1,", "{" * 100 + "}" * 100, "{a b}", "1 2"])
def test_fastjson_refuses_what_is_not_its_dialect(text: str) -> None:
    with pytest.raises(FastjsonError):
        fastjson.loads(text)


def test_standard_json_goes_through_unchanged() -> None:
    document = {"topicList": ["a", "b"], "n": 1.5, "s": base64.b64encode(b"x").decode()}
    assert fastjson.loads(json.dumps(document)) == document
    assert json.loads(fastjson.dumps(document)) == document
