"""``--broker rocketmq://NAMESRV:9876``: inspection and admin commands through a running broker.

Instead of opening a store, a command given ``--broker`` asks the broker(s) a name server knows
with the remoting requests RocketMQ's own admin tool and clients make (``RemotingBroker``:
consume statistics, pulls that commit nothing, key-index queries, sends), so it works against a
``postbox broker`` and an Apache RocketMQ cluster alike, on this machine or another.
``--access-key``/``--secret-key`` sign every request (the broker's ACL; a resend needs the
right to write the group's retry topic).

Served over ``--broker``: ``store stats`` (every master's runtime table), ``store topics``,
``consumer progress``, ``dlq list``, ``dlq resend``, and every ``query`` (``id`` takes an
offsetMsgId, or a UNIQ_KEY with ``--topic``). ``store dump``, ``verify`` and ``repair`` read the
files and have no remote form. Over ``--broker`` a resend is not marked: the mark lives in the
store's ``config/dlqResends.json``, which only an embedded broker writes; ``dlq list`` over
``--broker`` finds the resends in the log instead (``remote_resend_marks``: the copies in
``%RETRY%group`` that carry the dead letter's UNIQ_KEY and name it in ``DLQ_ORIGIN_MESSAGE_ID``),
so the mark holds for an Apache cluster too, for as long as the log keeps those copies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

import typer

from postbox.framework import environment
from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import MessageView, SendResult
from postbox.storage_engine.broker.dlq_resends import ResendMark
from postbox.storage_engine.contract.send_back import PROPERTY_DLQ_ORIGIN_MESSAGE_ID, resend_copy
from postbox.storage_engine.formats.topic_names import retry_topic

from .common import CliError

BROKER_URL_SCHEME = "rocketmq://"
BROKER_ENV_VAR = environment.BROKER.name
ACCESS_KEY_ENV_VAR = environment.ACCESS_KEY.name
SECRET_KEY_ENV_VAR = environment.SECRET_KEY.name

BrokerUrlOption = Annotated[str | None, typer.Option(
    "--broker", metavar="URL", envvar=BROKER_ENV_VAR, show_default=False,
    help="Ask a running broker instead of reading a store: rocketmq://NAMESRV:9876 "
         "(';'-separated name servers), a postbox broker or an Apache RocketMQ cluster.")]
AccessKeyOption = Annotated[str | None, typer.Option(
    "--access-key", metavar="KEY", envvar=ACCESS_KEY_ENV_VAR, show_default=False,
    help="ACL access key for --broker (with --secret-key).")]
SecretKeyOption = Annotated[str | None, typer.Option(
    "--secret-key", metavar="SECRET", envvar=SECRET_KEY_ENV_VAR, show_default=False,
    help="ACL secret key for --broker.")]


def namesrv_addresses(url: str) -> str:
    """The name-server list of a ``rocketmq://`` URL; a ``CliError`` for anything else."""
    if not url.startswith(BROKER_URL_SCHEME) or not url[len(BROKER_URL_SCHEME):].strip("/"):
        raise CliError(f"--broker takes {BROKER_URL_SCHEME}HOST:PORT[;HOST:PORT…], got {url!r}")
    return url[len(BROKER_URL_SCHEME):].strip("/")


@contextlib.contextmanager
def remote_broker(url: str, access_key: str | None = None,
                  secret_key: str | None = None) -> Iterator[RemotingBroker]:
    """A ``RemotingBroker`` for the URL for the length of the block."""
    if (access_key is None) != (secret_key is None):
        raise CliError("--access-key and --secret-key go together")
    with RemotingBroker(namesrv_addresses(url), access_key=access_key,
                        secret_key=secret_key) as broker:
        yield broker


def remote_resend_marks(broker: RemotingBroker, group: str,
                        dead_letters: list[MessageView]) -> dict[int, ResendMark]:
    """DLQ offset → ``ResendMark`` from the resend copies found in ``%RETRY%group`` (one
    UNIQ_KEY query per dead letter that has a UNIQ_KEY)."""
    marks = {}
    retry = retry_topic(group)
    for dead_letter in dead_letters:
        if not dead_letter.unique_key:
            continue
        copies = [copy for copy in broker.find_by_unique_key(retry, dead_letter.unique_key)
                  if copy.properties.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID) == dead_letter.msg_id]
        if copies:
            last = max(copies, key=lambda copy: copy.store_timestamp_ms)
            marks[dead_letter.queue_offset] = ResendMark(len(copies), last.store_timestamp_ms,
                                                         last.msg_id)
    return marks


def resend_remotely(broker: RemotingBroker, group: str, dead_letter: MessageView,
                    original_topic: str) -> SendResult:
    """``Broker.resend_dead_letter`` over remoting: a fresh copy for ``%RETRY%group`` with
    ``RETRY_TOPIC`` = the original topic (the group's consumers only, under that topic)."""
    return broker.send(resend_copy(dead_letter, retry_topic(group),
                                   original_topic=original_topic),
                       queue_id=0)  # a retry topic has one queue; a default route has more
