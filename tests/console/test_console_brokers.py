"""The console's pages against running brokers — ``postbox broker start`` and the lab's live
Apache RocketMQ 5.3.3 — through ``postbox console --broker rocketmq://…``, in a real browser:
topics; consumer groups with a real lag for a remoting (pull) consumer and for a gRPC (pop)
consumer of the official Python client; message search by id and by key; a dead letter
requeued to the group's retry topic, where a consumer takes it. Every check is read back from
the broker through the remoting client as well, not only from the page."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest

from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import GetStatus, Message
from postbox.storage_engine.formats import PROPERTY_DLQ_ORIGIN_MESSAGE_ID
from postbox.storage_engine.formats.topic_names import retry_topic
from tests.console.browsing import TOKEN, sign_in
from tests.console.scenario import console_process
from tests.support.polling import wait_until
from tests.support.rocketmq_lab import LAB_TIMEOUT_S

pytestmark = [pytest.mark.timeout(600), pytest.mark.leaves_threads(
    "Playwright's sync API runs an asyncio loop for the module's browser, whose default "
    "executor keeps its worker threads (asyncio_N) until the browser closes; the Python "
    "gRPC client keeps its own until the process ends")]
RUN = f"{int(time.time() * 1000) % 10**8}"  # the live lab lives for the session: fresh names
TOPIC = f"ConsoleOrders{RUN}"
PULL_GROUP = f"console-pull-{RUN}"
POP_GROUP = f"console-pop-{RUN}"
QUEUES = 2
CONSUMED, LEFT = 6, 3  # each consumer takes the first CONSUMED messages, LEFT stay unconsumed


@dataclasses.dataclass(frozen=True)
class Target:
    """A running broker: its name server (remoting) and its gRPC endpoint."""

    name: str
    namesrv: str
    grpc: str


@dataclasses.dataclass
class Seeded:
    """What the module put into the target."""

    target: Target
    keys: list[str]
    unique_keys: list[str]
    dead_letter_key: str = ""


@pytest.fixture(scope="module", params=[
    "postbox", pytest.param("apache", marks=[pytest.mark.live_rocketmq,
                                             pytest.mark.timeout(LAB_TIMEOUT_S)])])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Target]:
    if request.param == "apache":
        lab = request.getfixturevalue("live_rocketmq")
        yield Target("apache", lab.namesrv, lab.proxy_endpoint)
        return
    from tests.lab.postbox_side import PostboxEndpoint

    endpoint = PostboxEndpoint(tmp_path_factory.mktemp("console-broker")).start()
    try:
        yield Target("postbox", endpoint.process.namesrv_address, endpoint.address)
    finally:
        endpoint.close()


def consume_by_grpc(target: Target, count: int) -> None:
    """The official Python client's SimpleConsumer (pop) takes and acks ``count`` messages."""
    from rocketmq.v5.exception.client_exception import InternalErrorException

    from tests.broker_node.grpc_v2.rocketmq_clients import configuration, start_simple_consumer

    clients: list = []
    try:
        consumer = start_simple_consumer(clients, configuration(target.grpc), POP_GROUP, TOPIC)
        taken: list = []

        def take() -> bool:
            try:
                items = consumer.receive(count - len(taken), 30)
            except InternalErrorException as error:
                # Apache's proxy answers a receive that comes before the client's settings
                # (its telemetry stream) with a NullPointerException: retry
                if "settings" not in str(error):
                    raise
                return False
            for item in items:
                consumer.ack(item)
                taken.append(item)
            return len(taken) >= count
        wait_until(take, 90, "the gRPC consumer's messages")
    finally:
        for client in clients:
            client.shutdown()


def consume_by_pull(remote: RemotingBroker, upto: dict[int, int]) -> None:
    """The remoting consumer commits ``upto[queue]`` on each queue."""
    for queue_id, offset in upto.items():
        remote.commit_offset(PULL_GROUP, TOPIC, queue_id, offset)


def total_lag(remote: RemotingBroker, group: str) -> int | None:
    """The group's lag on TOPIC in the broker, or None while a queue has no offset."""
    queues = [queue for queue in remote.consumer_progress(group) if queue.topic == TOPIC]
    if not queues or any(queue.committed_offset is None for queue in queues):
        return None
    return sum(queue.lag for queue in queues)


@pytest.fixture(scope="module")
def seeded(target: Target) -> Seeded:
    """TOPIC with CONSUMED + LEFT keyed messages; PULL_GROUP committed past CONSUMED of them,
    POP_GROUP acked CONSUMED of them over gRPC; one message of PULL_GROUP dead-lettered."""
    seeded = Seeded(target, [], [])
    with RemotingBroker(target.namesrv) as remote:
        remote.create_topic(TOPIC, QUEUES)
        wait_until(lambda: remote.topic_config(TOPIC), 30, "the topic's route")
        receipts = []
        for index in range(CONSUMED):
            key = f"order-{RUN}-{index}"
            receipts.append(remote.send(Message(TOPIC, f'{{"n": {index}}}'.encode(),
                                                keys=[key]), queue_id=index % QUEUES))
            seeded.keys.append(key)
        consume_by_grpc(target, CONSUMED)
        consume_by_pull(remote, {queue: max(r.queue_offset for r in receipts
                                            if r.queue_id == queue) + 1
                                 for queue in range(QUEUES)})
        for index in range(CONSUMED, CONSUMED + LEFT):
            key = f"order-{RUN}-{index}"
            receipts.append(remote.send(Message(TOPIC, f'{{"n": {index}}}'.encode(),
                                                keys=[key]), queue_id=index % QUEUES))
            seeded.keys.append(key)
        seeded.unique_keys = [receipt.unique_key for receipt in receipts]
        first = receipts[0]
        [view] = remote.pull(PULL_GROUP, TOPIC, first.queue_id, first.queue_offset,
                             max_count=1).messages
        remote.send_back(PULL_GROUP, view, delay_level=-1, reason="ValueError: order 0 is bad")
        seeded.dead_letter_key = view.unique_key
        wait_until(lambda: remote.dead_letters(PULL_GROUP, 0, 8), 30, "the dead letter")
        for group in (PULL_GROUP, POP_GROUP):
            wait_until(lambda group=group: total_lag(remote, group) == LEFT, 60,
                       f"{group}'s lag of {LEFT} in the broker",
                       detail=lambda group=group: remote.consumer_progress(group))
    return seeded


@pytest.fixture(scope="module")
def console_url(seeded: Seeded) -> Iterator[str]:
    """The console over the target broker only, with a write token."""
    with console_process(["--broker", f"rocketmq://{seeded.target.namesrv}"],
                         env={"POSTBOX_CONSOLE_WRITE_TOKEN": TOKEN}) as url:
        yield url


def test_topics(page, seeded: Seeded) -> None:
    page.goto("/topics")
    assert not page.locator(".source-error").count(), page.content()[-2000:]
    row = page.locator(f"tr[data-topic='{TOPIC}']")
    assert row.count() == QUEUES, row.all_inner_texts()
    with RemotingBroker(seeded.target.namesrv) as remote:
        assert remote.topic_config(TOPIC) is not None


@pytest.mark.parametrize("group", [PULL_GROUP, POP_GROUP], ids=["remoting", "grpc"])
def test_consumer_group_lag(page, seeded: Seeded, group: str) -> None:
    with RemotingBroker(seeded.target.namesrv) as remote:
        progress = {queue.queue_id: queue for queue in remote.consumer_progress(group)
                    if queue.topic == TOPIC}
    assert sum(queue.lag for queue in progress.values()) == LEFT, progress
    page.goto(f"/groups?group={group}")
    assert not page.locator(".source-error").count(), page.content()[-2000:]
    rows = page.locator(f"table[data-group='{group}'] tr[data-topic='{TOPIC}']")
    assert rows.count() == QUEUES, page.content()[-3000:]
    lag_cells = rows.locator("td:nth-child(6)")  # the lag column
    lags = [int(text) for text in lag_cells.all_inner_texts()]
    committed = rows.locator("td.committed").all_inner_texts()
    assert all(lag >= 0 for lag in lags) and sum(lags) == LEFT, (lags, committed)
    assert sorted(committed) == sorted(str(queue.committed_offset)
                                       for queue in progress.values())


@pytest.mark.parametrize("by", ["id", "key"])
def test_message_search(page, seeded: Seeded, by: str) -> None:
    index = CONSUMED + 1  # an unconsumed one
    query = seeded.unique_keys[index] if by == "id" else seeded.keys[index]
    page.goto(f"/messages?by={by}&topic={TOPIC}&q={query}")
    assert not page.locator(".source-error").count(), page.content()[-2000:]
    links = page.locator("a.message-link")
    assert links.count() >= 1, page.content()[-2000:]
    links.first.click()
    assert page.locator("#unique-key").inner_text() == seeded.unique_keys[index]
    assert f'"n": {index}' in page.locator("pre.body").first.inner_text()
    with RemotingBroker(seeded.target.namesrv) as remote:
        [found] = remote.find_by_unique_key(TOPIC, seeded.unique_keys[index])
        assert seeded.keys[index] in found.keys


def test_requeue_a_dead_letter_and_consume_it(page, seeded: Seeded) -> None:
    with RemotingBroker(seeded.target.namesrv) as remote:
        [letter] = remote.dead_letters(PULL_GROUP, 0, 8)
    sign_in(page)
    page.goto(f"/dlq?group={PULL_GROUP}")
    assert not page.locator(".source-error").count(), page.content()[-2000:]
    row = page.locator(f".failure-class tr[data-offset='{letter.queue_offset}']")
    row.locator("input.pick").check()
    page.locator(".failure-class button", has_text="requeue selected").click()
    outcome = page.locator("#outcome").inner_text()
    assert "re-sent 1" in outcome and retry_topic(PULL_GROUP) in outcome, outcome
    with RemotingBroker(seeded.target.namesrv) as remote:
        copies = wait_until(lambda: requeued_copies(remote, letter.msg_id), 30,
                            "the requeued copy in the retry topic")
        assert len(copies) == 1 and copies[0].unique_key == seeded.dead_letter_key
        copy = copies[0]
        remote.commit_offset(PULL_GROUP, retry_topic(PULL_GROUP), copy.queue_id,
                             copy.queue_offset + 1)  # the consumer took it
        retry_progress = [queue for queue in remote.consumer_progress(PULL_GROUP)
                          if queue.topic == retry_topic(PULL_GROUP)]
        assert retry_progress and sum(queue.lag for queue in retry_progress) == 0


def requeued_copies(remote: RemotingBroker, origin_msg_id: str) -> list:
    """The messages of the group's retry topic copied from the dead letter ``origin_msg_id``,
    as a consumer of the group pulls them."""
    config = remote.topic_config(retry_topic(PULL_GROUP))
    if config is None:
        return []
    copies = []
    for queue_id in range(config.read_queue_nums):
        result = remote.pull(PULL_GROUP, retry_topic(PULL_GROUP), queue_id, 0, max_count=32)
        if result.status is GetStatus.FOUND:
            copies += [view for view in result.messages
                       if view.properties.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID) == origin_msg_id]
    return copies
