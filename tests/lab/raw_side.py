"""Raw remoting on both sides of a side-by-side scenario: the lab's Apache RocketMQ broker and a
``postbox broker`` process, driven with the same frames (``bench/remoting_raw.py``), so that the
scenario can send what the official clients never send (garbage timer properties, ends of
unknown halves, answers from the wrong producer group) and observe response codes as they are.

- ``SHARED_SETTINGS``: the broker.conf keys both brokers get: checks of pending half messages
  after 3 s, every 2 s, at most 2 (then the half is discarded), and a timer roll window of 20
  slots (1 s each), so "past the roll window" is 21 s ahead. ``APACHE_ONLY_SETTINGS``: Apache
  gathers its op records (the ends of halves) for ``transactionOpBatchInterval`` (3 s) before
  writing them, and a check pass in between would check a half already ended; 100 ms here.
- ``ApacheSide`` / ``PostboxSide``: one broker each, named and addressed alike; ``PostboxSide``
  restarts on the same store (``kill`` is SIGKILL).
- ``send`` / ``send_half`` / ``end_fields``: SEND_MESSAGE_V2 and END_TRANSACTION headers.
- ``pull_all``: every message of a queue (a fresh connection: both brokers close a connection
  that stays idle for a minute).
- ``CheckingProducer``: a producer group's connection (heartbeat-registered) that answers the
  broker's CHECK_TRANSACTION_STATE with END_TRANSACTION (``fromTransactionCheck=true``), by the
  checked message's body, and records each check (body, ``TRANSACTION_CHECK_TIMES``).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.formats import decode_offset_msg_id
from tests.support.broker_process import TEST_BROKER_CONF, BrokerProcess
from tests.support.stored_records import decode_records

SHARED_SETTINGS = {"transactionTimeOut": "3000", "transactionCheckInterval": "2000",
                   "transactionCheckMax": "2", "timerRollWindowSlot": "20"}
APACHE_ONLY_SETTINGS = {"transactionOpBatchInterval": "100"}
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0
SEND, END = RequestCode.SEND_MESSAGE_V2, RequestCode.END_TRANSACTION
HEARTBEAT_S = 5.0


@dataclass
class ApacheSide:
    """The lab's extra Apache broker with the shared settings."""

    address: str
    name: str = "apache"


@dataclass
class PostboxSide:
    """A ``postbox broker`` process with the shared settings, on a store that outlives it."""

    directory: Path
    name: str = "postbox"
    process: BrokerProcess | None = None

    def start(self) -> PostboxSide:
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "broker.conf"
        conf.write_text(TEST_BROKER_CONF + "".join(f"{key}={value}\n"
                                                   for key, value in SHARED_SETTINGS.items()))
        self.process = BrokerProcess(self.directory / "store", broker_conf=conf).start()
        return self

    @property
    def address(self) -> str:
        assert self.process is not None
        return self.process.remoting_address

    def kill(self) -> None:
        """SIGKILL: a crash."""
        assert self.process is not None
        self.process.kill()

    def log_tail(self) -> str:
        """The last lines the broker process wrote to stderr (its log)."""
        return self.process.stderr_text()[-3000:] if self.process is not None else ""

    def stop(self) -> None:
        """SIGTERM; the server must exit 0."""
        if self.process is not None:
            code = self.process.stop()
            assert code == 0, self.log_tail()


def send(client: RawRemotingClient, topic: str, body: str, properties: dict[str, str], *,
         group: str = "sbs-producer", sys_flag: int = 0) -> RemotingCommand:
    """One SEND_MESSAGE_V2 to queue 0 of ``topic`` (auto-created on both brokers)."""
    return client.call(SEND, send_fields(topic, 0, properties=properties, group=group,
                                         sysFlag=sys_flag, bornTimestamp=int(time.time() * 1000)),
                       body.encode())


def send_half(client: RawRemotingClient, topic: str, body: str, group: str) -> dict[str, str]:
    """A half message, as the Java ``TransactionMQProducer`` sends it; its send answer's fields."""
    properties = {"UNIQ_KEY": f"{body}-{time.time_ns()}", "TRAN_MSG": "true", "PGROUP": group,
                  "WAIT": "true", "TAGS": "tx"}
    answer = send(client, topic, body, properties, group=group, sys_flag=0x4)
    assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
    return answer.ext_fields


def end_fields(sent: dict[str, str], state: int, group: str, *, check: bool = False,
               **changes: object) -> dict[str, object]:
    """END_TRANSACTION's header for the half ``sent`` names."""
    fields: dict[str, object] = {
        "producerGroup": group, "tranStateTableOffset": sent["queueOffset"],
        "commitLogOffset": decode_offset_msg_id(sent["msgId"])[1], "commitOrRollback": state,
        "fromTransactionCheck": str(check).lower(), "msgId": sent["transactionId"],
        "transactionId": sent["transactionId"]}
    fields.update(changes)
    return fields


def end(client: RawRemotingClient, fields: dict[str, object]) -> int:
    """END_TRANSACTION as a call (the Java client sends it oneway): its response code."""
    return client.call(END, fields).code


def pull_all(address: str, topic: str, queue_id: int = 0) -> list:
    """Every message of ``topic``/``queue_id`` from offset 0 (records as ``rmq_decoder`` reads
    them); [] when the topic does not exist (yet)."""
    records: list = []
    with RawRemotingClient(address) as client:
        while True:
            answer = client.call(RequestCode.PULL_MESSAGE, pull_fields(
                "sbs-reader", topic, queue_id, len(records), max_count=32))
            if answer.code != ResponseCode.SUCCESS:
                return records
            batch = decode_records(answer.body)
            if not batch:
                return records
            records.extend(batch)


def bodies(records: list) -> list[str]:
    return sorted(record.body.decode() for record in records)


@dataclass
class CheckingProducer:
    """A producer group's connection answering the broker's checks (see the module docstring)."""

    address: str
    group: str
    answers: dict[str, int]
    """Body → the state a check answers (missing: UNKNOWN)."""
    checks: list[tuple[str, str]] = field(default_factory=list)
    client: RawRemotingClient = field(init=False)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.client = RawRemotingClient(self.address)
        self.heartbeat()
        self._thread = threading.Thread(target=self._answer, name="sbs-checks", daemon=True)
        self._thread.start()

    def heartbeat(self) -> None:
        body = json.dumps({"clientID": f"sbs-{self.group}", "consumerDataSet": [],
                           "producerDataSet": [{"groupName": self.group}]}).encode()
        answer = self.client.call(RequestCode.HEART_BEAT, {}, body)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    def _answer(self) -> None:
        last_beat = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - last_beat > HEARTBEAT_S:
                self.heartbeat()
                last_beat = time.monotonic()
            try:
                request = self.client.server_requests.get(timeout=0.2)
            except queue.Empty:
                continue
            if request.code != RequestCode.CHECK_TRANSACTION_STATE:
                continue
            [record] = decode_records(request.body)
            body = record.body.decode()
            self.checks.append((body, record.properties.get("TRANSACTION_CHECK_TIMES", "")))
            fields = request.ext_fields
            self.client.oneway(END, {
                "producerGroup": self.group, "commitOrRollback": self.answers.get(body, UNKNOWN),
                "tranStateTableOffset": fields["tranStateTableOffset"],
                "commitLogOffset": fields["commitLogOffset"], "fromTransactionCheck": "true",
                "msgId": fields.get("msgId", ""), "transactionId": fields.get("transactionId",
                                                                              "")})

    def checks_of(self, body: str) -> list[str]:
        """The ``TRANSACTION_CHECK_TIMES`` of each check of ``body``, in arrival order."""
        return [times for checked, times in list(self.checks) if checked == body]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.client.close()

    def __enter__(self) -> CheckingProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
