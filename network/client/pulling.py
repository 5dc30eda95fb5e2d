"""Pulls over remoting, and long polling as the framework's ``wait_for_arrival`` asks for it.

``Puller.pull`` is ``BrokerClient.pull``: one PULL_MESSAGE to the master of the queue's broker
(``pull_answers`` maps the answer to the embedded broker's ``GetResult``).

**Long polling.** The framework pulls every queue without waiting and then parks its idle
queues in ``wait_for_arrival(positions)``. Over remoting the long poll *is* a pull: for every
parked queue the puller sends one suspended pull (sysFlag 0x2, held by the broker until a
message arrives or ``LONG_POLL_SUSPEND_MS`` pass), all of them at once over the multiplexed
connections, and the wait returns True as soon as one answers with something other than
"nothing new". A suspended pull needs the group and the subscription: they come from the idle
pull that preceded the wait (``pull`` remembers, per group and queue, the offset at which it
found nothing). A parked position no pull explains is watched by polling GET_MAX_OFFSET every
``PROBE_INTERVAL_MS`` instead.

**Nothing pulled twice, nothing lost.** A suspended pull is a *flight*, kept per (group, topic,
queue): its answer is returned by the next ``pull`` of the same group, queue, offset, tags and
batch size (that pull then sends nothing), and a flight still in the air is reused by the next
wait rather than sent again, so a broker holds at most one pull per consumer queue. A flight
whose offset no longer matches the caller's (it moved on, or was rebalanced away) is
abandoned: the connection forgets it and drops its answer; offsets are the client's, so a
dropped answer loses nothing. ``wake_waiters()`` and ``cancel()`` end waits at once (cancel is
checked every ``CANCEL_CHECK_INTERVAL_MS``); flights stay in the air for the next wait.

**Read-ahead.** After a pull that filled its batch the puller sends the next pull of that queue
at once (a flight without suspend), so the broker works while the framework consumes; the
caller's next pull at that offset takes its answer. After a pull that caught up with the queue
it sends the long poll at once instead. At most one flight per queue.

**A held long poll answers for the broker.** While the broker holds a long poll of a queue at
the offset a pull asks for, it has nothing new there (it answers the poll the moment it has):
that pull returns the poll's "nothing new" without a call, and the next wait reuses the poll.
An answer already on its way has landed by the time the wait looks, which then returns at once.
So a consumer whose queues are idle sends nothing but its long polls: a message on one queue
costs that queue's poll and the next one, not a pull of every queue, twice, per pull round.

Thread-safety: every method may be called from any thread (one condition guards the flights
and idle records; answers land on connection reader threads, which only store them).
Nothing here survives a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from postbox.storage_engine.contract.message import GetResult, GetStatus
from postbox.storage_engine.contract.rules import validate_queue_key
from postbox.storage_engine.errors import BrokerUnavailableError, InvalidQueueError

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .connection import Connection, PendingCall
from .context import ClientContext
from .errors import RemotingClientError, RouteNotFoundError
from .pull_answers import get_result, is_nothing_new, pull_request
from .routes import QueueRef

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]  # (topic, framework queue id)
FlightKey = tuple[str, str, int]  # (group, topic, framework queue id)

PULL_TIMEOUT_MS = 10_000
LONG_POLL_SUSPEND_MS = 15_000  # what RocketMQ's push consumer asks a broker to hold
LONG_POLL_MARGIN_MS = 10_000  # RocketMQ's broker re-checks held pulls every 5 s
CANCEL_CHECK_INTERVAL_MS = 100
PROBE_INTERVAL_MS = 100
RETRY_LONG_POLL_MIN_MS = 100  # a long poll that ended early is sent again if this much is left
FLIGHT_KEEP_MS = 30_000  # an answer nobody took is dropped after this
IDLE_RECORDS_MAX = 100_000
LONG_POLL_LIVED_MIN_MS = 500  # a long poll answered sooner is not sent again (probe instead)
_NOTHING_NEW = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE,
                GetStatus.NO_MATCHED_LOGIC_QUEUE)


@dataclass(eq=False)
class _Flight:
    """A pull sent ahead of its caller: a long poll, or a read-ahead."""

    key: FlightKey
    offset: int
    tags: str | None
    max_count: int
    long_poll: bool
    address: str
    connection: Connection
    future: PendingCall
    sent_s: float
    expires_s: float
    answer: RemotingCommand | None = None
    error: BaseException | None = None
    landed_s: float = 0.0
    held: GetResult | None = None  # a long poll: the "nothing new" the broker holds it on

    def matches(self, offset: int, tags: str | None, max_count: int) -> bool:
        return (self.offset, self.tags, self.max_count) == (offset, tags, max_count)

    @property
    def done(self) -> bool:
        return self.landed_s > 0

    def arrived(self) -> bool:
        """Landed with news: messages, an offset to fix, or an error to surface."""
        return self.done and (self.error is not None or self.answer is None
                              or not is_nothing_new(self.answer))


class Puller:
    """PULL_MESSAGE, long polls and read-ahead for one client (see the module docstring)."""

    def __init__(self, context: ClientContext, *, sub_version: int, read_ahead: bool = True,
                 pull_timeout_ms: int = PULL_TIMEOUT_MS,
                 long_poll_suspend_ms: int = LONG_POLL_SUSPEND_MS) -> None:
        self._context = context
        self._routes = context.routes
        self._sub_version = sub_version
        self._read_ahead = read_ahead
        self._pull_timeout_ms = pull_timeout_ms
        self._suspend_ms = long_poll_suspend_ms
        namespace = context.namespace
        self._wrap = namespace.wrap
        self._unwrap = namespace.unwrap if namespace.name else None
        self._cond = threading.Condition()
        self._flights: dict[FlightKey, _Flight] = {}
        self._idle: dict[QueueKey, dict[str, tuple[int, str | None, int, GetResult]]] = {}
        self._wake_generation = 0
        self._closed = False

    # ---- pull ------------------------------------------------------------------------------

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int, *,
             tags: str | None = None, suspend_timeout_ms: int = 0) -> GetResult:
        """One pull (the answer of a matching flight when one landed); see ``BrokerClient``."""
        key = (group, topic, queue_id)
        flight = self._take_flight(key, offset, tags, max_count)
        if isinstance(flight, GetResult):
            if suspend_timeout_ms <= 0:
                self._after_pull(key, offset, tags, max_count, flight)
                return flight
            flight = None
        answer = self._flight_answer(flight) if flight is not None else None
        if answer is None or flight is None:
            try:
                ref, address = self._locate(topic, queue_id)
            except RouteNotFoundError:
                return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, [], 0, 0, 0)
            request = self._request(group, topic, ref, offset, max_count, tags,
                                    max(0, suspend_timeout_ms))
            timeout_ms = (suspend_timeout_ms + LONG_POLL_MARGIN_MS if suspend_timeout_ms > 0
                          else self._pull_timeout_ms)
            answer = self._call(address, request, timeout_ms)
        else:
            address = flight.address
        result = get_result(answer, offset=offset, queue_id=queue_id, tags=tags,
                            address=address, topic=topic, unwrap=self._unwrap)
        self._after_pull(key, offset, tags, max_count, result)
        return result

    def _request(self, group: str, topic: str, ref: QueueRef, offset: int, max_count: int,
                 tags: str | None, suspend_ms: int) -> RemotingCommand:
        return pull_request(self._wrap(group), self._wrap(topic), ref.broker_name, ref.queue_id,
                            offset, max_count, tags, suspend_ms, self._sub_version)

    def _locate(self, topic: str, queue_id: int) -> tuple[QueueRef, str]:
        try:
            return self._routes.locate(topic, queue_id)
        except IndexError as error:
            raise InvalidQueueError(str(error), topic=topic) from None

    def _call(self, address: str, request: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        return self._context.broker_call(address, request, timeout_ms)

    def _take_flight(self, key: FlightKey, offset: int, tags: str | None,
                     max_count: int) -> _Flight | GetResult | None:
        """The flight whose answer this pull may take (removed from the table); the "nothing
        new" of a matching long poll the broker still holds (left for the next wait); or
        None."""
        with self._cond:
            flight = self._flights.get(key)
            if flight is None:
                return None
            if not flight.matches(offset, tags, max_count):
                self._drop(flight)
                return None
            if flight.long_poll and not flight.done:
                return flight.held
            del self._flights[key]
            return flight

    def _flight_answer(self, flight: _Flight) -> RemotingCommand | None:
        """A taken flight's answer (waiting for a read-ahead still in the air); None when it
        brought nothing usable (an error, or nothing new: the caller pulls afresh)."""
        if not flight.long_poll and not flight.done:
            try:
                flight.future.result(timeout=max(0.0, flight.expires_s - time.monotonic()))
            except Exception:  # timeout or connection error: pull afresh
                flight.connection.forget(flight.future)
                return None
            self._landed(flight)
        if flight.error is not None or flight.answer is None:
            return None
        return None if is_nothing_new(flight.answer) else flight.answer

    def _after_pull(self, key: FlightKey, offset: int, tags: str | None, max_count: int,
                    result: GetResult) -> None:
        """Remember an idle queue for the next wait, or send the read-ahead of a full batch."""
        group, topic, queue_id = key
        idle = result.status in _NOTHING_NEW or (
            result.status is GetStatus.NO_MATCHED_MESSAGE and result.next_offset == offset)
        with self._cond:
            records = self._idle.get((topic, queue_id))
            if idle:
                if records is None:
                    if len(self._idle) >= IDLE_RECORDS_MAX:
                        self._idle.clear()  # a bound, not a loss: waits then probe offsets
                    records = self._idle[(topic, queue_id)] = {}
                records[group] = (offset, tags, max_count, result)
                return
            if records is not None:
                records.pop(group, None)
            stale = self._flights.get(key)
            if stale is not None and stale.offset == offset:
                self._drop(stale)  # the broker's answer to it would repeat this one
        if not self._read_ahead or result.status is not GetStatus.FOUND:
            return
        if result.next_offset - offset >= max_count:
            self._send_flight(key, result.next_offset, tags, max_count, long_poll=False)
        elif result.next_offset >= result.max_offset:  # caught up: wait at the broker
            self._send_flight(key, result.next_offset, tags, max_count, long_poll=True,
                              held=GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [],
                                             result.next_offset, result.min_offset,
                                             result.next_offset))

    # ---- flights ---------------------------------------------------------------------------

    def _send_flight(self, key: FlightKey, offset: int, tags: str | None, max_count: int, *,
                     long_poll: bool, held: GetResult | None = None) -> _Flight | None:
        """Send a pull ahead of its caller (a long poll: ``held`` is the "nothing new" it
        waits beyond); None when it could not be sent."""
        group, topic, queue_id = key
        suspend_ms = self._suspend_ms if long_poll else 0
        try:
            ref, address = self._locate(topic, queue_id)
            connection = self._context.connections.get(address)
            future = connection.call_async(self._request(group, topic, ref, offset, max_count,
                                                         tags, suspend_ms))
        except (RemotingClientError, BrokerUnavailableError, InvalidQueueError) as error:
            log.debug("[pull] flight for %s at %d not sent: %s", key, offset, error)
            return None
        timeout_ms = suspend_ms + LONG_POLL_MARGIN_MS if long_poll else self._pull_timeout_ms
        now_s = time.monotonic()
        flight = _Flight(key, offset, tags, max_count, long_poll, address, connection, future,
                         now_s, now_s + timeout_ms / 1000, held=held)
        with self._cond:
            old = self._flights.get(key)
            if self._closed:
                connection.forget(future)
                return None
            if old is not None:
                self._drop(old)
            self._flights[key] = flight
        future.add_done_callback(lambda _: self._landed(flight))
        return flight

    def _landed(self, flight: _Flight) -> None:
        """Store a flight's answer (connection reader thread: nothing else happens here)."""
        with self._cond:
            if flight.done:
                return
            try:
                flight.answer = flight.future.result(timeout=0)
            except BaseException as error:  # kept for the caller to surface
                flight.error = error
            flight.landed_s = time.monotonic()
            self._cond.notify_all()

    def _drop(self, flight: _Flight) -> None:
        """Abandon a flight (condition held): its answer, if it comes, is discarded."""
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        if not flight.done:
            flight.connection.forget(flight.future)

    def _sweep(self, now_s: float) -> None:
        """Drop flights past their time, and answers nobody took (condition held)."""
        for flight in list(self._flights.values()):
            if (not flight.done and now_s > flight.expires_s) or (
                    flight.done and now_s - flight.landed_s > FLIGHT_KEEP_MS / 1000):
                self._drop(flight)

    # ---- waiting ---------------------------------------------------------------------------

    def wait_for_arrival(self, positions: Mapping[QueueKey, int], timeout_ms: int,
                         cancel: Callable[[], bool] | None = None) -> bool:
        """True once some parked queue has news; False on timeout, wake or ``cancel()``."""
        for queue in positions:
            validate_queue_key(queue)
        deadline_s = time.monotonic() + max(0, timeout_ms) / 1000
        with self._cond:
            generation = self._wake_generation
            self._sweep(time.monotonic())
        flights, unwatched = self._park(positions)
        next_probe_s = 0.0
        while True:
            now_s = time.monotonic()
            if unwatched and now_s >= next_probe_s:
                if self._probe(unwatched):
                    return True
                next_probe_s = time.monotonic() + PROBE_INTERVAL_MS / 1000
            with self._cond:
                if any(flight.arrived() for flight in flights):
                    return True
                if (generation != self._wake_generation or self._closed
                        or (cancel is not None and cancel())):
                    return False
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    return False
                ended = [flight for flight in flights if flight.done]
                if not ended or remaining_s < RETRY_LONG_POLL_MIN_MS / 1000:
                    step_s = remaining_s
                    if cancel is not None or unwatched:
                        step_s = min(step_s, CANCEL_CHECK_INTERVAL_MS / 1000)
                    self._cond.wait(step_s)
                    continue
            flights = self._renew(flights, ended, unwatched)

    def _park(self, positions: Mapping[QueueKey, int]
              ) -> tuple[list[_Flight], dict[QueueKey, int]]:
        """Long polls for the parked queues an idle pull explains; the others to probe."""
        wanted: list[tuple[FlightKey, int, str | None, int, GetResult]] = []
        unwatched: dict[QueueKey, int] = {}
        flights: list[_Flight] = []
        with self._cond:
            for queue, offset in positions.items():
                groups = [(group, record) for group, record in self._idle.get(queue, {}).items()
                          if record[0] == offset]
                if not groups:
                    unwatched[queue] = offset
                for group, (_, tags, max_count, idle) in groups:
                    key = (group, *queue)
                    flight = self._flights.get(key)
                    if (flight is not None and flight.matches(offset, tags, max_count)
                            and flight.long_poll and (not flight.done or flight.arrived())):
                        flights.append(flight)
                    else:
                        wanted.append((key, offset, tags, max_count, idle))
        for key, offset, tags, max_count, idle in wanted:
            flight = self._send_flight(key, offset, tags, max_count, long_poll=True, held=idle)
            if flight is None:
                unwatched[(key[1], key[2])] = offset
            else:
                flights.append(flight)
        return flights, unwatched

    def _renew(self, flights: list[_Flight], ended: list[_Flight],
               unwatched: dict[QueueKey, int]) -> list[_Flight]:
        """Send again the long polls that ended with nothing new while the wait goes on."""
        kept = [flight for flight in flights if not flight.done]
        for flight in ended:
            with self._cond:
                if self._flights.get(flight.key) is flight:
                    del self._flights[flight.key]
            if flight.landed_s - flight.sent_s < LONG_POLL_LIVED_MIN_MS / 1000:
                unwatched[(flight.key[1], flight.key[2])] = flight.offset  # no hold: probe
                continue
            again = self._send_flight(flight.key, flight.offset, flight.tags, flight.max_count,
                                      long_poll=True, held=flight.held)
            if again is None:
                unwatched[(flight.key[1], flight.key[2])] = flight.offset
            else:
                kept.append(again)
        return kept

    def _probe(self, unwatched: Mapping[QueueKey, int]) -> bool:
        """Whether a queue nobody long-polls grew past its position (GET_MAX_OFFSET)."""
        for (topic, queue_id), offset in unwatched.items():
            try:
                ref, address = self._locate(topic, queue_id)
                answer = self._call(address, RemotingCommand.request(
                    RequestCode.GET_MAX_OFFSET, {"topic": self._wrap(topic),
                                                 "queueId": ref.queue_id,
                                                 "bname": ref.broker_name}),
                    self._pull_timeout_ms)
            except (RemotingClientError, BrokerUnavailableError, InvalidQueueError):
                continue  # unknown yet or unreachable: nothing arrived that we can see
            if (answer.code == ResponseCode.SUCCESS
                    and answer.fields.get_int("offset", 0) > offset):
                return True
        return False

    def wake_waiters(self) -> None:
        """End every wait in progress (they return False); flights stay in the air."""
        with self._cond:
            self._wake_generation += 1
            self._cond.notify_all()

    def close(self) -> None:
        """End waits and abandon every flight."""
        with self._cond:
            self._closed = True
            for flight in list(self._flights.values()):
                self._drop(flight)
            self._idle.clear()
            self._wake_generation += 1
            self._cond.notify_all()

    def flight_count(self) -> int:
        """Pulls in the air or landed and not yet taken (tests, stats)."""
        with self._cond:
            return len(self._flights)


__all__ = ["CANCEL_CHECK_INTERVAL_MS", "LONG_POLL_SUSPEND_MS", "PULL_TIMEOUT_MS", "Puller"]
