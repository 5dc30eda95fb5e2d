"""The native engine's remoting frame codec against the pure-Python reference in ``wire.py``.

``postbox_native.decode_json_header`` and ``encode_json_frame`` may decline (None) and leave a
header to the reference; whatever they do return must be exactly the reference's: the same
decoded fields, the same frame bytes. Bounded fuzzing (hypothesis, a few hundred examples per
test) over the commands and headers peers send, over arbitrary JSON documents, white space,
escapes and surrogates, and over mutated and arbitrary bytes; and the fast domain is checked to
be taken (a Java client's send, a response with a remark) so that the fast path is what runs.
Without the extension these tests skip (a failure under ``CI=true``: CI builds it with
``make``).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.remoting_raw import send_fields
from postbox.network.protocol import wire
from postbox.network.protocol.wire import (
    FrameDecoder,
    FrameLimits,
    RemotingCommand,
    SerializeType,
    WireError,
    decode,
    encode,
)
from tests.support.outcomes import outcome

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMITS = FrameLimits(max_frame_bytes=64 * 1024, max_header_bytes=16 * 1024, max_ext_fields=6)
INT32 = st.integers(-(2**31), 2**31 - 1)
ANY_TEXT = st.text(st.characters(codec=None), max_size=12)  # surrogates and controls included
SEND_FIELDS = wire.wire_fields(send_fields(  # a Java client's half send, 13 fields
    "order-events", 3, properties={"TRAN_MSG": "true", "PGROUP": "orders", "UNIQ_KEY": "7F00"},
    group="orders", v2=False, sysFlag=4, batch=False, maxReconsumeTimes=16))


def _header_of(command: RemotingCommand) -> bytes:
    """The JSON header the reference writes for ``command``."""
    frame = wire._encode_reference(command, SerializeType.JSON)
    return frame[8:len(frame) - len(command.body)]


def _reference_header(header: bytes, limits: FrameLimits = LIMITS) -> object:
    """What the reference makes of a JSON header: the command's fields or the error."""
    def fields() -> tuple[object, ...]:
        command = wire._decode_json_header(memoryview(header), limits)
        return (command.code, command.opaque, command.flag, command.ext_fields, command.remark,
                command.language, command.version)
    return outcome(fields)


def _same_or_declined(header: bytes, limits: FrameLimits = LIMITS) -> bool:
    """Assert the native decoder returns the reference's fields or declines; True if taken."""
    found = native.decode_json_header(header, limits.max_ext_fields)
    if found is None:
        return False
    reference = _reference_header(header, limits)
    assert reference[:2] == ("ok", found)
    assert list(found[3]) == list(reference[1][3])  # the fields' order too
    return True


commands = st.builds(
    RemotingCommand, code=INT32, opaque=INT32, flag=st.integers(0, 3),
    ext_fields=st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=8),
    body=st.binary(max_size=64), remark=st.one_of(st.none(), ANY_TEXT),
    language=st.one_of(st.sampled_from(["JAVA", "GO", "PYTHON", "CPP"]), ANY_TEXT),
    version=INT32)


@FUZZ
@given(commands)
@example(RemotingCommand(10, 7, 0, dict(SEND_FIELDS), b"x" * 100, None, "JAVA", 475))
@example(RemotingCommand(1, 7, 1, {}, b"", "a \"quoted\"\\ \n\t\x00\x1f\x7f é 😀 \u2028", "JAVA"))
@example(RemotingCommand(1, 7, 1, {}, b"", "lone \ud800 surrogate"))
def test_encoded_frames_are_the_references(command: RemotingCommand) -> None:
    reference = outcome(wire._encode_reference, command, SerializeType.JSON)
    found = native.encode_json_frame(command.code, command.flag, command.language,
                                     command.opaque, command.version, command.ext_fields,
                                     command.remark, command.body)
    if found is not None:
        assert reference[:2] == ("ok", found)
    texts = [command.language, command.remark or "", *command.ext_fields,
             *command.ext_fields.values()]
    if not any(re.search("[\ud800-\udfff]", text) for text in texts):
        assert found is not None, "a command of str fields and int32 numbers is the fast domain"
    assert outcome(encode, command) == reference  # what wire.encode returns, either way


@pytest.mark.parametrize("value", [True, 2**63, -(2**63) - 1, 3.0, "7"])
def test_encoder_declines_numbers_outside_its_domain(value) -> None:
    command = RemotingCommand(code=value, opaque=1)  # type: ignore[arg-type]
    assert native.encode_json_frame(value, 0, "JAVA", 1, 1, {}, None, b"") is None
    assert outcome(encode, command) == outcome(wire._encode_reference, command,
                                               SerializeType.JSON)


@pytest.mark.parametrize("odd", [{"k": 1}, {1: "v"}, "not a dict"])
def test_encoder_declines_fields_that_are_not_strings(odd) -> None:
    assert native.encode_json_frame(1, 0, "JAVA", 1, 1, odd, None, b"") is None


def test_encoder_declines_a_body_that_is_not_bytes() -> None:
    assert native.encode_json_frame(1, 0, "JAVA", 1, 1, {}, None, bytearray(b"x")) is None
    command = RemotingCommand(1, body=bytearray(b"x"))  # type: ignore[arg-type]
    assert encode(command) == wire._encode_reference(command, SerializeType.JSON)


@FUZZ
@given(commands, st.booleans())
def test_headers_the_reference_writes_decode_the_same(command: RemotingCommand,
                                                      ascii_only: bool) -> None:
    header = _header_of(command)
    if ascii_only:  # the same document with every non-ASCII character escaped
        header = json.dumps(json.loads(header), ensure_ascii=True).encode()
    taken = _same_or_declined(header, FrameLimits(max_ext_fields=512))
    surrogate = re.search("[\ud800-\udfff]", header.decode("utf-8", "surrogatepass"))
    if not surrogate and b"\\ud" not in header.lower():
        assert taken, "a header of strings and int32 numbers is the fast domain"


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40),
                         st.floats(allow_nan=True, allow_infinity=True), ANY_TEXT)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(ANY_TEXT, inner, max_size=3)), max_leaves=10)
header_documents = st.fixed_dictionaries({}, optional={
    "code": st.one_of(INT32, st.integers(-(2**33), 2**33), json_values),
    "opaque": st.one_of(INT32, json_values),
    "flag": st.one_of(st.integers(0, 3), json_values),
    "version": st.one_of(st.integers(0, 500), json_values),
    "language": st.one_of(st.sampled_from(["JAVA", "GO"]), json_values),
    "remark": st.one_of(ANY_TEXT, json_values),
    "serializeTypeCurrentRPC": st.one_of(st.just("JSON"), json_values),
    "other": json_values,
    "extFields": st.one_of(st.dictionaries(ANY_TEXT, st.one_of(ANY_TEXT, json_values),
                                           max_size=8), json_values),
})


@FUZZ
@given(header_documents, st.booleans(), st.sampled_from(["", " ", "\n\t ", "\r"]))
def test_arbitrary_json_headers_decode_the_same(document, ascii_only: bool, space: str) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only, separators=(space + ",", ":" + space))
    _same_or_declined(f"{space}{text}{space}".encode("utf-8", "surrogatepass"))


@FUZZ
@given(st.data())
def test_mutated_headers_decode_the_same(data) -> None:
    command = data.draw(commands)
    header = bytearray(_header_of(command))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(header) - 1))
        choice = data.draw(st.integers(0, 2))
        if choice == 0:
            header[at] = data.draw(st.sampled_from(b'"\\{}[],:0-9.eE+u \x00\xff'))
        elif choice == 1:
            del header[at]
        else:
            header[at:at] = data.draw(st.sampled_from(
                [b"\\u00e9", b"\\ud83d\\ude00", b"\\ud800", b"\\udc00x", b"\\x", b"01", b"-0",
                 b"1e3", b",", b'"', b"}", b"null", b"true"]))
    _same_or_declined(bytes(header))


@FUZZ
@given(st.binary(max_size=256))
def test_arbitrary_bytes_decode_the_same(header: bytes) -> None:
    _same_or_declined(header)


@pytest.mark.parametrize("header", [
    b'{"code":10,"extFields":{"a":"1"},"flag":0,"language":"JAVA","opaque":5,'
    b'"serializeTypeCurrentRPC":"JSON","version":475}',
    b'{"code":0,"flag":1,"language":"GO","opaque":-5,"remark":null,"version":0}',
    b'{"code":0,"remark":"r\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"}',
    b'{"extFields":{"k":"first","k":"last","j":"x"}}',
    b' { } ',
    b'{"code":1,"other":1.5e-3,"more":[]}',
])
def test_fixed_headers_decode_the_same(header: bytes) -> None:
    found = native.decode_json_header(header, 512)
    if header.startswith(b'{"code":1,"other"'):
        assert found is None  # a nested value: declined, the reference reads it
    else:
        assert found is not None
    _same_or_declined(header, FrameLimits(max_ext_fields=512))


@pytest.mark.parametrize("header", [
    b'{"code":2147483648}', b'{"code":1.0}', b'{"code":true}', b'{"code":01}',
    b'{"code":1} x', b'{"remark":"\\ud800"}', b'{"remark":"\x01"}', b'{"language":null}',
    b'{"extFields":{"a":1}}', b'{"extFields":null}', b'\xef\xbb\xbf{}', b'{"code":NaN}',
    b'{"a":"\xff"}', b'{"code":1,}', b"",
])
def test_headers_outside_the_fast_domain_are_declined(header: bytes) -> None:
    assert native.decode_json_header(header, 512) is None


def test_over_the_field_limit_is_declined_and_the_reference_refuses() -> None:
    header = json.dumps({"extFields": {str(n): "v" for n in range(7)}}).encode()
    assert native.decode_json_header(header, 6) is None
    with pytest.raises(WireError, match="over the limit of 6"):
        decode(b"\x00\x00\x00" + bytes([len(header)]) + header, LIMITS)


def test_frames_round_trip_through_the_decoder() -> None:
    command = RemotingCommand(10, 7, 0, dict(SEND_FIELDS), b"x" * 100, "ok", "JAVA", 475)
    (back,) = FrameDecoder().feed(encode(command))
    assert back == command
