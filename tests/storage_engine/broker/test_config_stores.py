"""Broker config files (``config/*.json``): the fastjson dialect, ``ConfigFile``'s ``.bak`` and
atomic replace, and the typed tables over them.

Everything runs on real files under ``tmp_path``. The golden broker home of a Java 4.4.0 broker is
read from ``shared/vectors`` (copied into ``tmp_path`` by ``vectors_copy``, skipped when absent):
every file must load and re-persist byte for byte. The crash test persists in a subprocess and
kills it with SIGKILL at random moments; its seed is printed in every assertion message.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.storage_engine import FakeClock, InvalidMessageError
from postbox.storage_engine.broker.config_file import ConfigFile, ConfigFileError
from postbox.storage_engine.broker.config_stores import (
    ConfigStores,
    ConsumerFilterTable,
    ConsumerOffsetTable,
    DataVersion,
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
)
from postbox.storage_engine.errors import InvalidQueueError, InvalidTopicError, StorageIOError
from postbox.storage_engine.formats import NESTING_DEPTH_MAX, decode_config_json, encode_config_json
from postbox.storage_engine.formats.fastjson import FastjsonError, ObjectKey, decode_fastjson
from tests.support.paths import REPO_ROOT
from tests.support.rmq_decoder import VECTORS_DIR

BROKER_HOME = "java-4.4.0-shaoxubao/broker_home"
TABLE_BY_FILE = {
    "consumerFilter.json": ConsumerFilterTable,
    "consumerOffset.json": ConsumerOffsetTable,
    "delayOffset.json": DelayOffsetTable,
    "subscriptionGroup.json": SubscriptionGroupTable,
    "topics.json": TopicConfigTable,
}
GROUP = "please_rename_unique_group_name_4"
RETRY_TOPIC = "%RETRY%" + GROUP
# VECTORS.md §9, consumerOffset.json of the 4.4.0 broker home (189 bytes, no trailing newline).
CONSUMER_OFFSET_BYTES = (
    b'{\n\t"offsetTable":{\n\t\t"TopicTest@please_rename_unique_group_name_4":'
    b'{0:250,1:250,2:250,3:250\n\t\t},\n\t\t"%RETRY%please_rename_unique_group_name_4@'
    b'please_rename_unique_group_name_4":{0:0\n\t\t}\n\t}\n}')


def vector_config_files() -> list[Path]:
    return sorted(VECTORS_DIR.glob("*/**/config/*.json*"))


def original(name: str) -> bytes:
    return (VECTORS_DIR / BROKER_HOME / "config" / name).read_bytes()


@pytest.fixture
def config_dir(vectors_copy) -> Path:
    """A writable copy of the 4.4.0 broker's ``config`` directory."""
    directory = vectors_copy(BROKER_HOME) / "config"
    directory.chmod(0o755)  # the vectors are read-only; copytree keeps the modes
    for path in directory.iterdir():
        path.chmod(0o644)
    return directory


# --------------------------------------------------------------------------------------------
# The fastjson dialect
# --------------------------------------------------------------------------------------------

def test_every_vector_config_file_decodes_and_re_encodes_byte_for_byte():
    java_files = [p for p in vector_config_files() if "java-" in str(p)]
    if not java_files:
        pytest.skip(f"golden vectors not present at {VECTORS_DIR}")
    for path in java_files:
        text = path.read_bytes().decode("utf-8")
        assert not text.endswith("\n"), path
        assert encode_config_json(decode_config_json(text)) == text, path


def test_int_keyed_maps_open_inline_and_close_on_their_own_line():
    document = {"offsetTable": {
        f"TopicTest@{GROUP}": {0: 250, 1: 250, 2: 250, 3: 250},
        f"{RETRY_TOPIC}@{GROUP}": {0: 0}}}
    assert encode_config_json(document).encode() == CONSUMER_OFFSET_BYTES
    assert decode_config_json(CONSUMER_OFFSET_BYTES.decode()) == document
    assert encode_config_json({"offsetTable": {}}) == '{\n\t"offsetTable":{}\n}'
    assert encode_config_json({}) == "{}"


def test_beans_nest_with_tabs_and_arrays_stay_inline():
    document = {"a": {"b": True, "c": None}, "list": [1, {"x": "y"}, []], "z": -5}
    assert encode_config_json(document) == (
        '{\n\t"a":{\n\t\t"b":true,\n\t\t"c":null\n\t},\n'
        '\t"list":[1,{\n\t\t"x":"y"\n\t},[]],\n\t"z":-5\n}')


def test_strings_are_escaped_as_fastjson_does():
    text = "\x00\x07\b\t\n\x0b\f\r\x1f\"\\/\x7f\x9f\xa0\u2028é{1:2}"
    expected = ('"\\u0000\\u0007\\b\\t\\n\\u000B\\f\\r\\u001F\\"\\\\/\\u007F\\u009F\xa0'
                '\\u2028é{1:2}"')
    assert encode_config_json(text) == expected
    assert decode_config_json(expected) == text


def test_string_values_that_look_like_int_keys_survive():
    text = '{"k":"{1:2,3:4}","x{5:":"a\\",6:b",7:"{8:"}'
    assert decode_config_json(text) == {"k": "{1:2,3:4}", "x{5:": 'a",6:b', 7: "{8:"}
    document = {"{1:": {2: "{3:4}"}, "s": ",9:"}
    assert decode_config_json(encode_config_json(document)) == document


def test_one_reader_and_the_caller_states_what_an_unquoted_number_key_becomes():
    """Config files and remoting bodies share the reader; only the key policy differs, and
    every caller states it (there is no default that one of them would get wrong)."""
    text = '{"offsetTable":{0:250,-1:3},"route":{"brokerAddrs":{0:"10.0.0.1:10911"}}}'
    assert decode_config_json(text) == decode_fastjson(text, number_keys="int") == {
        "offsetTable": {0: 250, -1: 3}, "route": {"brokerAddrs": {0: "10.0.0.1:10911"}}}
    assert decode_fastjson(text, number_keys="text") == {
        "offsetTable": {"0": 250, "-1": 3}, "route": {"brokerAddrs": {"0": "10.0.0.1:10911"}}}
    with pytest.raises(TypeError):
        decode_fastjson(text)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="number_keys"):
        decode_fastjson(text, number_keys="str")  # type: ignore[arg-type]
    stats = '{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5}}'
    for policy in ("int", "text"):
        assert decode_fastjson(stats, number_keys=policy) == {  # type: ignore[arg-type]
            ObjectKey.of(brokerName="b", queueId=0, topic="T"): {"brokerOffset": 5}}
    with pytest.raises(FastjsonError):  # only an integer is an int key
        decode_fastjson("{1.5:2}", number_keys="int")
    assert decode_fastjson("{1.5:2}", number_keys="text") == {"1.5": 2}
    for document in ("[NaN]", '{"a":Infinity}'):
        with pytest.raises(FastjsonError):
            decode_fastjson(document, number_keys="text")


def test_strict_json_loads_and_quoted_numeric_keys_stay_strings():
    assert decode_config_json('{ "0" : 1, "a": [1.5, -2e3, false] }') == {
        "0": 1, "a": [1.5, -2000.0, False]}
    assert decode_config_json(json.dumps({"x": {"1": 2}}, indent=2)) == {"x": {"1": 2}}


@pytest.mark.parametrize("text", [
    "", "   ", "{", '{"a":1,}', "{a:1}", '{"a":01}', "[1 2]", '{"a":1} x', "{1.5:2}",
    '{"a":"\t"}', '{"a":tru}', "{1:2", '{"a":1 "b":2}', "nul"])
def test_malformed_text_is_rejected_with_a_position(text):
    with pytest.raises(json.JSONDecodeError):
        decode_config_json(text)


def test_nesting_is_limited_both_ways():
    deep: object = 1
    for _ in range(NESTING_DEPTH_MAX + 1):
        deep = [deep]
    with pytest.raises(ValueError, match="nest"):
        encode_config_json(deep)
    with pytest.raises(ValueError, match="nest"):
        decode_config_json("[" * (NESTING_DEPTH_MAX + 1) + "]" * (NESTING_DEPTH_MAX + 1))
    with pytest.raises(TypeError):
        encode_config_json({True: 1})


_KEYS = st.one_of(st.text(max_size=8), st.integers(min_value=-(2**70), max_value=2**70))
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12))
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(_KEYS, children, max_size=5)),
    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_DOCUMENTS)
def test_decode_inverts_encode(document):
    assert decode_config_json(encode_config_json(document)) == document


@settings(max_examples=150, deadline=None)
@given(st.recursive(_SCALARS, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=20))
def test_strict_json_from_the_standard_library_decodes_unchanged(document):
    assert decode_config_json(json.dumps(document)) == document
    assert decode_config_json(json.dumps(document, indent="\t")) == document


# --------------------------------------------------------------------------------------------
# ConfigFile: .bak fallback and atomic replace
# --------------------------------------------------------------------------------------------

def test_persist_keeps_the_previous_content_as_bak(tmp_path):
    config = ConfigFile(tmp_path / "config" / "x.json")
    assert config.load() is None
    config.persist({"v": 1})
    assert not config.backup_path.exists()
    config.persist({"v": 2, "m": {3: 4}})
    assert config.backup_path.read_text() == '{\n\t"v":1\n}'
    assert config.path.read_text() == '{\n\t"v":2,\n\t"m":{3:4\n\t}\n}'
    assert not config.temp_path.exists()
    assert config.load() == {"v": 2, "m": {3: 4}}


def test_a_write_error_is_a_storage_io_error_naming_the_path(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    config = ConfigFile(tmp_path / "file" / "x.json")
    with pytest.raises(StorageIOError, match=r"x\.json") as caught:
        config.persist({})
    assert caught.value.path == str(config.path)


def _garbles(data: bytes, rng: random.Random) -> list[bytes]:
    """Damaged copies of a config file that can never decode."""
    position = rng.randrange(len(data))
    return [data[:1], data[:len(data) // 2], data[:-1],
            data[:position] + b"\x00" + data[position + 1:],
            data[:position] + b"\xff" + data[position + 1:], b"   \n"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_garbled_file_recovers_the_exact_bak_state_and_is_kept_aside(config_dir, seed, caplog):
    rng = random.Random(seed)
    clock = FakeClock()
    for garbled in _garbles(original("topics.json"), rng):
        (config_dir / "topics.json").write_bytes(garbled)
        (config_dir / "topics.json.bak").write_bytes(original("topics.json.bak"))
        table = TopicConfigTable(config_dir, clock=clock)
        with caplog.at_level(logging.WARNING):
            table.load()
        context = f"seed={seed} garbled={garbled[:40]!r}"
        assert table.data_version == DataVersion(2, 1551626277404), context
        assert RETRY_TOPIC not in table.names() and "TopicTest" in table.names(), context
        kept = config_dir / f"topics.json.corrupt-{clock.now_ms()}"
        assert kept.read_bytes() == garbled, context
        assert not (config_dir / "topics.json").exists(), context
        assert "[config]" in caplog.text and "topics.json.bak" in caplog.text
        table.persist()  # the main file was moved aside, so the good .bak is not rotated away
        assert (config_dir / "topics.json").read_bytes() == original("topics.json.bak"), context
        assert (config_dir / "topics.json.bak").read_bytes() == original("topics.json.bak")
        kept.unlink()
        clock.advance(1)


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_a_missing_or_empty_file_loads_the_bak(config_dir, state):
    main = config_dir / "consumerOffset.json"
    main.unlink()
    if state == "empty":
        main.write_bytes(b"")
    table = ConsumerOffsetTable(config_dir)
    table.load()
    assert table.offsets("TopicTest", GROUP) == {0: 250, 1: 250, 2: 250, 3: 250}
    assert table.query(RETRY_TOPIC, GROUP, 0) == 0
    assert not main.exists()
    assert list(config_dir.glob("*.corrupt-*")) == []  # an empty file holds nothing to keep


def test_the_vector_bak_files_load(config_dir):
    (config_dir / "topics.json").unlink()
    (config_dir / "consumerOffset.json").unlink()
    stores = ConfigStores(config_dir, FakeClock())
    stores.load_all()
    assert stores.topics.data_version == DataVersion(2, 1551626277404)
    assert len(stores.topics.names()) == 8 and RETRY_TOPIC not in stores.topics.names()
    assert stores.consumer_offsets.query("TopicTest", GROUP, 3) == 250


def test_both_files_garbled_refuses_to_load_and_names_both(config_dir):
    main, backup = config_dir / "topics.json", config_dir / "topics.json.bak"
    main.write_bytes(original("topics.json")[:100])
    backup.write_bytes(b"\x00garbage")
    with pytest.raises(ConfigFileError) as caught:
        TopicConfigTable(config_dir).load()
    message = str(caught.value)
    assert str(main) in message and str(backup) in message
    assert "Restore" in message and "rename or delete them" in message
    assert caught.value.path == str(main)
    assert main.read_bytes() == original("topics.json")[:100]  # nothing moved or deleted
    assert backup.read_bytes() == b"\x00garbage"


@pytest.mark.parametrize("backup", [None, b"", b"{"])
def test_a_garbled_file_without_a_usable_bak_refuses_to_load(tmp_path, backup):
    config = ConfigFile(tmp_path / "delayOffset.json")
    config.path.write_bytes(b'{"offsetTable":{1:')
    if backup is not None:
        config.backup_path.write_bytes(backup)
    with pytest.raises(ConfigFileError, match=r"delayOffset\.json"):
        config.load()
    assert config.path.read_bytes() == b'{"offsetTable":{1:'


def test_a_missing_file_with_a_garbled_bak_refuses_to_load(tmp_path):
    config = ConfigFile(tmp_path / "topics.json")
    config.backup_path.write_bytes(b"{oops")
    with pytest.raises(ConfigFileError, match=r"topics.json is missing.*topics.json.bak"):
        config.load()


def test_a_file_of_the_wrong_shape_counts_as_undecodable(config_dir):
    (config_dir / "consumerOffset.json").write_text('{"offsetTable":[1,2]}')
    table = ConsumerOffsetTable(config_dir)
    table.load()
    assert table.query("TopicTest", GROUP, 0) == 250
    assert len(list(config_dir.glob("consumerOffset.json.corrupt-*"))) == 1


_CRASH_DOCUMENT_SOURCE = '''
def crash_document(counter):
    size = 1 + counter % 97
    return {"counter": counter,
            "offsetTable": {f"t{i}@g": {q: counter * q for q in range(i % 7)} for i in range(size)}}
'''
_CRASH_CHILD = _CRASH_DOCUMENT_SOURCE + '''
import sys
from postbox.storage_engine.broker.config_file import ConfigFile
config, counter = ConfigFile(sys.argv[1]), int(sys.argv[2])
print("ready", flush=True)
while True:
    config.persist(crash_document(counter))
    counter += 1
'''
_namespace: dict = {}
exec(_CRASH_DOCUMENT_SOURCE, _namespace)  # the same function the killed child runs
crash_document = _namespace["crash_document"]


def test_kill_9_during_persist_always_leaves_a_written_document(tmp_path):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    path = tmp_path / "config" / "consumerOffset.json"
    ConfigFile(path).persist(crash_document(0))
    last = 0
    for iteration in range(30):
        child = subprocess.Popen([sys.executable, "-c", _CRASH_CHILD, str(path), str(last + 1)],
                                 cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready", f"seed={seed}"
        time.sleep(rng.uniform(0.0, 0.06))
        child.kill()  # SIGKILL
        child.wait()
        child.stdout.close()
        loaded = ConfigFile(path).load()
        context = f"seed={seed} iteration={iteration} files={sorted(os.listdir(path.parent))}"
        assert loaded is not None, context
        assert loaded == crash_document(loaded["counter"]), context
        assert loaded["counter"] >= last, context
        last = loaded["counter"]
    assert last > 0, f"seed={seed}: the children never completed a persist"
    assert list(path.parent.glob("*.corrupt-*")) == []


# --------------------------------------------------------------------------------------------
# The typed tables
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("file_name", sorted(TABLE_BY_FILE))
def test_each_vector_file_re_persists_byte_for_byte(config_dir, file_name):
    table = TABLE_BY_FILE[file_name](config_dir, clock=FakeClock())
    table.load()
    assert table.persist() is False  # unchanged since loaded: nothing to write
    assert table.persist(force=True)
    assert (config_dir / file_name).read_bytes() == original(file_name)
    assert (config_dir / (file_name + ".bak")).read_bytes() == original(file_name)


def test_config_stores_load_and_persist_all_unchanged(config_dir):
    stores = ConfigStores(config_dir, FakeClock())
    stores.load_all()
    stores.persist_all()
    for file_name in TABLE_BY_FILE:
        assert (config_dir / file_name).read_bytes() == original(file_name), file_name


def test_vector_beans_load_with_rocketmq_defaults(config_dir):
    stores = ConfigStores(config_dir, FakeClock())
    stores.load_all()
    assert stores.topics.data_version == DataVersion(3, 1551626364371)
    assert stores.topics.get("TopicTest") == TopicConfig("TopicTest", 4, 4)
    assert stores.topics.get("TBW102") == TopicConfig("TBW102", perm=7)
    assert stores.topics.names()[-1] == RETRY_TOPIC
    for group in stores.subscription_groups.names():
        assert stores.subscription_groups.get(group) == SubscriptionGroupConfig(group)
    assert stores.delay_offsets.levels() == {}
    assert stores.consumer_filters.topics() == []


def test_strict_json_offsets_load_and_unknown_fields_survive(vectors_copy):
    config_dir = vectors_copy("rust-0.9.0-rocketmq-rust") / "config"
    config_dir.chmod(0o755)
    table = ConsumerOffsetTable(config_dir)
    table.load()
    assert table.query("V1UpgradeTopic", "V1UpgradeGroup", 0) == 1
    table.commit("V1UpgradeTopic", "V1UpgradeGroup", 1, 7)
    table.persist()
    text = (config_dir / "consumerOffset.json").read_text()
    assert '"V1UpgradeTopic@V1UpgradeGroup":{0:1,1:7\n\t\t}' in text
    assert decode_config_json(text) == {
        "dataVersion": {"stateVersion": 0, "timestamp": 1786728134258, "counter": 0},
        "offsetTable": {"V1UpgradeTopic@V1UpgradeGroup": {0: 1, 1: 7}},
        "resetOffsetTable": {}, "pullOffsetTable": {},
        "processedPullOffsetTable": {"V1UpgradeGroup": ["V1UpgradeTopic"]}}


def test_consumer_offsets_commit_query_and_clean(tmp_path):
    table = ConsumerOffsetTable(tmp_path)
    for topic, group in [("Topic", "g1"), ("TopicTest", "g1"), ("TopicTest", "g2"),
                         ("%RETRY%g1", "g1")]:
        table.commit(topic, group, 0, 10)
        table.commit(topic, group, 3, 5)
    table.commit("Topic", "g1", 0, 4)  # a reset backwards is accepted
    assert table.query("Topic", "g1", 0) == 4
    assert table.query("Topic", "g1", 1) is None and table.query("Nope", "g1", 0) is None
    assert table.offsets("TopicTest", "g2") == {0: 10, 3: 5}
    assert table.clean_topic("Topic") == 1  # exact: TopicTest is not Topic
    assert table.keys() == ["TopicTest@g1", "TopicTest@g2", "%RETRY%g1@g1"]
    assert table.remove_group("g1") == 2
    assert table.keys() == ["TopicTest@g2"]
    table.commit("Later", "g3", 1, 2)
    table.persist()
    again = ConsumerOffsetTable(tmp_path)
    again.load()
    assert again.keys() == ["TopicTest@g2", "Later@g3"]  # loaded order, new entries appended
    assert again.offsets("Later", "g3") == {1: 2}


@pytest.mark.parametrize(("args", "error"), [
    (("bad/topic", "g", 0, 1), InvalidTopicError), (("t", "a@b", 0, 1), InvalidMessageError),
    (("t", "", 0, 1), InvalidMessageError), (("t", "g", -1, 1), InvalidQueueError),
    (("t", "g", 0, -1), InvalidMessageError), (("t", "g", True, 1), InvalidQueueError)])
def test_consumer_offsets_reject_bad_names_and_numbers(tmp_path, args, error):
    table = ConsumerOffsetTable(tmp_path)
    with pytest.raises(error):
        table.commit(*args)
    assert table.keys() == []


def test_foreign_keys_with_odd_topic_names_are_logged_and_kept(tmp_path, caplog):
    text = '{\n\t"offsetTable":{\n\t\t"bad/topic@g":{0:1\n\t\t},\n\t\t"nogroup":{}\n\t}\n}'
    (tmp_path / "consumerOffset.json").write_text(text)
    table = ConsumerOffsetTable(tmp_path)
    with caplog.at_level(logging.WARNING):
        table.load()
    assert "bad/topic@g" in caplog.text and "nogroup" in caplog.text
    table.persist()
    assert (tmp_path / "consumerOffset.json").read_text() == text


def test_consumer_offsets_commit_from_many_threads_while_persisting(tmp_path):
    table = ConsumerOffsetTable(tmp_path)
    stop = threading.Event()

    def commit_all(worker: int) -> None:
        for offset in range(300):
            table.commit("T", f"g{worker}", offset % 4, offset)

    def persist_loop() -> None:
        while not stop.is_set():
            table.persist()

    persister = threading.Thread(target=persist_loop)
    persister.start()
    workers = [threading.Thread(target=commit_all, args=(n,)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    persister.join()
    table.persist()
    again = ConsumerOffsetTable(tmp_path)
    again.load()
    for n in range(8):
        assert again.offsets("T", f"g{n}") == {0: 296, 1: 297, 2: 298, 3: 299}


def test_delay_offsets_are_written_with_unquoted_level_keys(tmp_path):
    table = DelayOffsetTable(tmp_path)
    table.set(1, 5)
    table.set(2, 7)
    assert table.get(1) == 5 and table.get(3) is None
    with pytest.raises(InvalidMessageError):
        table.set(0, 1)
    table.persist()
    assert (tmp_path / "delayOffset.json").read_text() == '{\n\t"offsetTable":{1:5,2:7\n\t}\n}'


def test_topic_changes_bump_the_data_version_from_the_clock(config_dir):
    clock = FakeClock(1_700_000_000_000)
    table = TopicConfigTable(config_dir, clock=clock)
    table.load()
    assert table.put(TopicConfig("TopicTest", 4, 4)) is False  # unchanged: no bump
    assert table.data_version == DataVersion(3, 1551626364371)
    clock.advance(5)
    assert table.put(TopicConfig("orders", perm=6)) is True
    assert table.data_version == DataVersion(4, 1_700_000_000_005)
    assert table.remove("TBW102") is True and table.remove("TBW102") is False
    assert table.data_version.counter == 5
    with pytest.raises(InvalidTopicError):
        table.put(TopicConfig("a.b"))
    table.persist()
    text = (config_dir / "topics.json").read_text()
    assert text.endswith('\t\t"orders":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n'
                         '\t\t\t"readQueueNums":8,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n'
                         '\t\t\t"topicName":"orders",\n\t\t\t"topicSysFlag":0,\n'
                         '\t\t\t"writeQueueNums":8\n\t\t}\n\t}\n}')
    assert (config_dir / "topics.json.bak").read_bytes() == original("topics.json")


def test_unknown_fields_of_a_5x_file_survive_byte_for_byte(tmp_path):
    text = ('{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"stateVersion":0,\n\t\t"timestamp":7\n'
            '\t},\n\t"topicConfigTable":{\n\t\t"t":{\n\t\t\t"attributes":{\n\t\t\t\t"k":"v"\n'
            '\t\t\t},\n\t\t\t"order":true,\n\t\t\t"perm":2,\n\t\t\t"readQueueNums":1,\n'
            '\t\t\t"topicFilterType":"MULTI_TAG",\n\t\t\t"topicName":"t",\n'
            '\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":2\n\t\t}\n\t}\n}')
    (tmp_path / "topics.json").write_text(text)
    table = TopicConfigTable(tmp_path, clock=FakeClock())
    table.load()
    assert table.get("t").extra == {"attributes": {"k": "v"}} and table.get("t").order is True
    table.persist()
    assert (tmp_path / "topics.json").read_text() == text


def test_new_subscription_groups_are_written_like_the_broker_writes_them(config_dir):
    table = SubscriptionGroupTable(config_dir, clock=FakeClock())
    table.load()
    assert table.put(SubscriptionGroupConfig("orders_group")) is True
    with pytest.raises(InvalidMessageError):
        table.put(SubscriptionGroupConfig("bad group"))
    table.persist()
    text = (config_dir / "subscriptionGroup.json").read_text()
    template = original("subscriptionGroup.json").decode()
    start = template.index('\t\t"SELF_TEST_C_GROUP":{')
    block = template[start:template.index("\t\t}", start) + 3]
    assert block.replace("SELF_TEST_C_GROUP", "orders_group") + "\n\t}\n}" in text
    assert table.data_version.counter == 2


def test_consumer_filters_are_kept_as_loaded(tmp_path):
    text = ('{\n\t"filterDataByTopic":{\n\t\t"t":{\n\t\t\t"groupFilterData":{\n\t\t\t\t"g":{\n'
            '\t\t\t\t\t"bloomFilterData":{\n\t\t\t\t\t\t"bitNum":64,\n'
            '\t\t\t\t\t\t"bitPos":[1,5,9]\n\t\t\t\t\t},\n\t\t\t\t\t"expression":"a > 1",\n'
            '\t\t\t\t\t"expressionType":"SQL92"\n\t\t\t\t}\n\t\t\t},\n\t\t\t"topic":"t"\n'
            '\t\t}\n\t}\n}')
    (tmp_path / "consumerFilter.json").write_text(text)
    table = ConsumerFilterTable(tmp_path)
    table.load()
    assert table.topics() == ["t"]
    data = table.get("t")
    data["topic"] = "changed"  # a copy: the table is untouched
    table.persist()
    assert (tmp_path / "consumerFilter.json").read_text() == text
