"""Where simulated messages go: Kafka topics, a length-prefixed file, or memory.

The file format is the one the checks and the demo read: each message as a 4-byte big-endian
length followed by the message bytes, in the order they were sent (all destinations mixed).
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from devtools.sim.outbox import Delivery

_PREFIX = struct.Struct(">I")


@dataclass
class Counts:
    """What a sink has taken so far."""

    messages: int = 0
    bytes: int = 0

    def add(self, delivery: Delivery) -> None:
        self.messages += 1
        self.bytes += len(delivery.value)


class Sink(Protocol):
    counts: Counts

    def send(self, deliveries: Iterable[Delivery]) -> None: ...

    def pump(self) -> None:
        """Produce what a lagging topic holds and is now due (``Delivery.lag_ms``)."""
        ...

    def close(self) -> None: ...


class FileSink:
    """Messages as 4-byte big-endian length + bytes; topics and keys are not kept."""

    def __init__(self, path: str | Path) -> None:
        self._file: BinaryIO = Path(path).open("wb")  # noqa: SIM115 - closed by close()
        self.counts = Counts()

    def send(self, deliveries: Iterable[Delivery]) -> None:
        for d in deliveries:
            self._file.write(_PREFIX.pack(len(d.value)) + d.value)
            self.counts.add(d)

    def pump(self) -> None:
        """A file keeps the order sent: lags do not apply."""

    def close(self) -> None:
        self._file.close()


class MemorySink:
    """Keeps every delivery; for tests and in-process drivers."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.counts = Counts()

    def send(self, deliveries: Iterable[Delivery]) -> None:
        for d in deliveries:
            self.deliveries.append(d)
            self.counts.add(d)

    def pump(self) -> None:
        """Deliveries keep their ``lag_ms`` for the test to read."""

    def close(self) -> None:
        pass


class KafkaSink:
    """Produces each message to its destination's topic with the key the connector writes
    (``Delivery.key``; None, the default, produces a record without a key)."""

    def __init__(self, bootstrap: str, **settings: str | int) -> None:
        from confluent_kafka import Producer

        # Idempotence keeps the topic in the order sent: without it librdkafka may retry a
        # failed batch after later ones were written. Bench run 20261126-034430 (a topic made
        # a moment before) got URBHMSNR 1-5 (the STRT and the first four data messages) at
        # offsets 37-41, after 6-42, and the job rightly took them for redeliveries.
        conf: dict[str, str | int] = {"bootstrap.servers": bootstrap, "linger.ms": 5,
                                      "enable.idempotence": True, **settings}
        self._producer = Producer(conf)
        self.counts = Counts()
        # per topic, (due on time.monotonic(), delivery) held by a lagging connector
        self._held: dict[str, deque[tuple[float, Delivery]]] = {}

    def send(self, deliveries: Iterable[Delivery]) -> None:
        """Produce in order; a stalled delivery (``delay_ms``) waits that long first, as the
        connector held it, and so does everything after it. A lagging one (``lag_ms``) is
        held for its topic, and what follows on that topic behind it (``pump``)."""
        for d in deliveries:
            if d.delay_ms:
                self._producer.flush(30)
                time.sleep(d.delay_ms / 1000)
            held = self._held.get(d.topic)
            if d.lag_ms or held:
                due = time.monotonic() + d.lag_ms / 1000
                queue = self._held.setdefault(d.topic, deque())
                queue.append((max(due, queue[-1][0]) if queue else due, d))
                continue
            self._produce(d)
        self.pump()

    def pump(self) -> None:
        now = time.monotonic()
        for topic, queue in list(self._held.items()):
            while queue and queue[0][0] <= now:
                self._produce(queue.popleft()[1])
            if not queue:
                del self._held[topic]
        self._producer.poll(0)

    def _produce(self, d: Delivery) -> None:
        while True:
            try:
                self._producer.produce(d.topic, key=d.key, value=d.value)
                break
            except BufferError:  # local queue full: let the producer drain it
                self._producer.poll(0.1)
        self.counts.add(d)

    def close(self) -> None:
        """Produce what is held when it is due (a lag outlasts the run), then flush."""
        while self._held:
            due = min(q[0][0] for q in self._held.values())
            time.sleep(max(0.0, due - time.monotonic()))
            self.pump()
        remaining = self._producer.flush(30)
        if remaining:
            raise RuntimeError(f"{remaining} messages not delivered to Kafka")


def read_messages(path: str | Path) -> Iterator[bytes]:
    """The messages of a length-prefixed file, in order."""
    data = Path(path).read_bytes()
    at = 0
    while at < len(data):
        (length,) = _PREFIX.unpack_from(data, at)
        yield data[at + 4 : at + 4 + length]
        at += 4 + length
