"""Driving a Replicator into a sink: fixed runs, paced or flat-out load, request serving.

One loop, single-threaded: generate a transaction, send its messages, and while ahead of the
target rate answer requests from the input queue (or sleep). Being ahead of schedule is also
when the replicator sends its open messages, so a slow stream does not sit in a half-full
message. A progress line goes to stderr once a second; a final count at the end.

A connector stall (``Delivery.delay_ms``, faults.py ``stall``) is honoured by the Kafka sink:
it flushes what came before and sleeps that long before producing the held message, so the
whole load run waits with it (the message's URBHTIME stays when the replicator sent it).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from typing import Protocol, TextIO

from devtools.sim.replicator import Replicator
from devtools.sim.sinks import Sink


class RequestSource(Protocol):
    def poll(self, timeout: float) -> list[bytes]: ...

    def close(self) -> None: ...


class KafkaRequests:
    """The replicator's input queue: request messages from a Kafka topic."""

    def __init__(self, bootstrap: str, topic: str, group: str = "urb-sim",
                 **settings: str | int) -> None:
        """``settings``: further librdkafka options (a secured broker's TLS/SASL ones)."""
        from confluent_kafka import Consumer

        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                **settings,
            }
        )
        self._consumer.subscribe([topic])

    def poll(self, timeout: float) -> list[bytes]:
        messages = self._consumer.consume(num_messages=100, timeout=timeout)
        return [m.value() for m in messages if m.error() is None and m.value() is not None]

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True)
class LoadOptions:
    """transactions None means until duration ends (or forever); rate 0 means flat out."""

    transactions: int | None = 100
    duration: float | None = None
    rate: float = 0.0
    linger: float = 0.0
    progress: bool = False
    terminate: bool = True


@dataclass
class Summary:
    transactions: int
    requests: int
    messages: int
    bytes: int
    seconds: float

    def line(self) -> str:
        rate = self.transactions / self.seconds if self.seconds else 0.0
        return (
            f"done: {self.transactions} transactions, {self.messages} messages, "
            f"{self.bytes} bytes, {self.requests} requests in {self.seconds:.1f} s "
            f"({rate:.0f} tx/s)"
        )

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


class _Progress:
    def __init__(self, enabled: bool, stream: TextIO) -> None:
        self._enabled, self._stream, self._next = enabled, stream, 0.0

    def show(self, done: int, sink: Sink, elapsed: float, final: bool = False) -> None:
        if not self._enabled or (elapsed < self._next and not final):
            return
        self._next = elapsed + 1.0
        rate = done / elapsed if elapsed > 0 else 0.0
        self._stream.write(
            f"\rsim: {done} tx, {sink.counts.messages} msgs, "
            f"{sink.counts.bytes / 1e6:.1f} MB, {rate:.0f} tx/s   "
        )
        if final:
            self._stream.write("\n")
        self._stream.flush()


def drive(
    rep: Replicator,
    sink: Sink,
    options: LoadOptions,
    requests: RequestSource | None = None,
    stream: TextIO = sys.stderr,
) -> Summary:
    """STRT, transactions as the options say, requests answered meanwhile, then TERM."""
    started = time.monotonic()
    progress = _Progress(options.progress, stream)
    answered = 0
    done = 0
    sink.send(rep.start())
    try:
        while _more(options, done, time.monotonic() - started):
            answered += _wait_turn(rep, sink, options, requests, started, done)
            sink.send(rep.step())
            done += 1
            progress.show(done, sink, time.monotonic() - started)
        sink.send(rep.flush())
        answered += _linger(rep, sink, options, requests)
    except KeyboardInterrupt:
        sink.send(rep.flush())
    if options.terminate:
        sink.send(rep.terminate())
    elapsed = time.monotonic() - started
    progress.show(done, sink, elapsed, final=True)
    return Summary(done, answered, sink.counts.messages, sink.counts.bytes, elapsed)


def _more(options: LoadOptions, done: int, elapsed: float) -> bool:
    if options.transactions is not None and done >= options.transactions:
        return False
    return options.duration is None or elapsed < options.duration


def _wait_turn(
    rep: Replicator,
    sink: Sink,
    options: LoadOptions,
    requests: RequestSource | None,
    started: float,
    done: int,
) -> int:
    """Until the next transaction is due: send open messages and answer requests."""
    answered = 0
    if requests is not None and (options.rate or done % 100 == 0):
        answered += _serve(rep, sink, requests, 0.0)
    if not options.rate:
        return answered
    due = started + done / options.rate
    if time.monotonic() < due:
        sink.send(rep.flush())
    while (left := due - time.monotonic()) > 0:
        if requests is None:
            time.sleep(left)
        else:
            answered += _serve(rep, sink, requests, min(left, 0.1))
    return answered


def _serve(rep: Replicator, sink: Sink, requests: RequestSource, timeout: float) -> int:
    batch = requests.poll(timeout)
    for request in batch:
        sink.send(rep.answer(request))
    sink.pump()  # a lagging topic's held messages that are due
    return len(batch)


def _linger(
    rep: Replicator, sink: Sink, options: LoadOptions, requests: RequestSource | None
) -> int:
    """Keep answering requests after the stream ends (linger < 0: until interrupted)."""
    if requests is None or options.linger == 0:
        return 0
    answered = 0
    until = time.monotonic() + options.linger
    while options.linger < 0 or time.monotonic() < until:
        answered += _serve(rep, sink, requests, 0.2)
    return answered
