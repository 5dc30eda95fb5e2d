"""Hostile frames against both sides of the remoting protocol.

The client's reader survives an answer it cannot decode (a JSON header nested far past the
interpreter's stack): that call fails at once with ``ConnectionClosedError`` and the next call
reconnects, instead of a dead reader leaving every call to time out. Then bounded fuzzing
(hypothesis, a few hundred examples; seconds) of what both sides decode from the network —
frames of arbitrary bytes and arbitrary JSON headers, ``HeaderFields`` reads, fastjson bodies —
and of what they encode back: the only failure is the protocol's own error (``WireError``,
``HeaderFieldError``, ``FastjsonError``), and every decoded request's echo can be encoded.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.remoting_raw import nested_frame
from postbox.network.client.connection import Connection
from postbox.network.client.errors import ConnectionClosedError
from postbox.network.protocol import fastjson
from postbox.network.protocol.wire import (
    FrameDecoder,
    FrameLimits,
    RemotingCommand,
    SerializeType,
    WireError,
    decode,
    encode,
)
from postbox.storage_engine.formats.fastjson import FastjsonError
from tests.support.tiny_remoting_server import PeerSocket, TinyRemotingServer

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = FrameLimits(max_frame_bytes=64 * 1024, max_header_bytes=16 * 1024, max_ext_fields=64)


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_client_reader_survives_an_answer_nested_too_deeply(depth) -> None:
    def nested_first(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        if command.ext_fields["n"] == "first":
            return [nested_frame(depth, command.opaque)]
        return [command.response(0, remark="ok \ud800")]

    server = TinyRemotingServer(nested_first)
    connection = Connection(server.address)
    try:
        with pytest.raises(ConnectionClosedError, match="nested too deeply"):
            connection.call(RemotingCommand.request(99, {"n": "first"}), 10_000)
        answer = connection.call(RemotingCommand.request(99, {"n": "x"}), 10_000)
        assert answer.remark == "ok \ud800"  # a lone surrogate crosses as its JSON escape
    finally:
        connection.close()
        server.close()


def _frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (kind << 24) | len(header)) \
        + header + body


def _decodes_or_wire_error(stream: bytes, cuts: list[int]) -> list[RemotingCommand]:
    """Feed ``stream`` in pieces; every failure must be a ``WireError``."""
    decoder = FrameDecoder(LIMITS)
    commands: list[RemotingCommand] = []
    at = 0
    try:
        for cut in [*sorted(cuts), len(stream)]:
            commands += decoder.feed(stream[at:max(at, cut)])
            at = max(at, cut)
    except WireError:
        pass
    return commands


def _echo_encodes(command: RemotingCommand) -> None:
    """A refusal echoing every value of ``command`` can be encoded and decoded back."""
    values = " ".join([*command.ext_fields, *command.ext_fields.values(), command.remark or ""])
    answer = command.response(1, fields=dict(command.ext_fields), remark=values)
    (back,) = FrameDecoder().feed(encode(answer))
    assert (back.opaque, back.remark, back.ext_fields) == (command.opaque, values,
                                                           command.ext_fields)
    (back,) = FrameDecoder().feed(encode(answer, SerializeType.ROCKETMQ))  # no escapes: "?"
    assert (back.remark or "") == values.encode("utf-8", "replace").decode()


@FUZZ
@given(st.binary(max_size=512), st.lists(st.integers(0, 512), max_size=4))
def test_arbitrary_bytes_decode_or_raise_wire_error(stream: bytes, cuts: list[int]) -> None:
    for command in _decodes_or_wire_error(stream, cuts):
        _echo_encodes(command)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40),
                         st.floats(allow_nan=False), st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=12)
header_documents = st.fixed_dictionaries({}, optional={
    "code": st.one_of(st.integers(-(2**33), 2**33), json_values),
    "opaque": st.one_of(st.integers(-(2**33), 2**33), json_values),
    "flag": st.one_of(st.integers(0, 3), json_values),
    "version": st.one_of(st.integers(0, 500), json_values),
    "language": st.one_of(st.sampled_from(["JAVA", "GO"]), json_values),
    "remark": st.one_of(st.text(max_size=16), json_values),
    "extFields": st.one_of(st.dictionaries(st.text(max_size=6), json_values, max_size=5),
                           json_values),
})


@FUZZ
@given(header_documents, st.booleans(), st.binary(max_size=16))
def test_arbitrary_json_headers_decode_or_raise_wire_error(document, ascii_only: bool,
                                                           body: bytes) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only)
    header = text.encode("utf-8", "surrogatepass")  # raw surrogates: not UTF-8, refused
    try:
        command = decode(_frame(header, body)[4:], LIMITS)
    except WireError:
        return
    _echo_encodes(command)
    fields = command.fields
    for name in command.ext_fields:
        for read in (fields.get_str, fields.get_int, fields.get_bool):
            try:
                read(name)
            except WireError:  # HeaderFieldError included
                pass


@FUZZ
@given(st.binary(max_size=256))
def test_arbitrary_binary_headers_decode_or_raise_wire_error(header: bytes) -> None:
    try:
        command = decode(_frame(header, kind=1)[4:], LIMITS)
    except WireError:
        return
    _echo_encodes(command)


@FUZZ
@given(st.one_of(st.text(max_size=64), st.binary(max_size=64),
                 json_values.map(lambda value: json.dumps(value, ensure_ascii=False)),
                 st.integers(1, 5000).map(lambda depth: "[" * depth + "]" * depth),
                 st.integers(1, 5000).map(lambda depth: '{1:' * depth + "0" + "}" * depth)))
def test_arbitrary_bodies_parse_or_raise_fastjson_error(body) -> None:
    try:
        value = fastjson.loads(body)
    except FastjsonError:
        return
    fastjson.dumps(value)  # and what was read can be written back


@FUZZ
@given(st.text(max_size=24), st.text(max_size=24))
def test_any_text_in_an_answer_encodes(name: str, value: str) -> None:
    answer = RemotingCommand(code=17, opaque=5, flag=1, ext_fields={name: value},
                             remark=value, body=fastjson.dumps({name: value}))
    back = decode(encode(answer)[4:])
    assert (back.remark, back.ext_fields, back.body) == (value, {name: value}, answer.body)
    assert decode(encode(answer, SerializeType.ROCKETMQ)[4:]).opaque == 5
    assert fastjson.loads(answer.body) == {name: value}
