"""Where messages leave the replicator: per-destination numbering, open/closed, encoding.

URBHMSNR counts per destination (rule 1.5 of the seed) in the order messages are handed to the
messaging system, and a closed destination holds its messages until it is opened again (the
way a replicator with an SLOG keeps them), numbering them when they are finally sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pipeline.sim.clock import Clock, stck
from pipeline.sim.elements import Part
from pipeline.sim.model import Encoding, SimConfig
from pipeline.urb import encode_message, make_element

Body = list[Part]


class Delivery(NamedTuple):
    """One Kafka record: topic (the destination's), key, value (one replicator message)."""

    topic: str
    key: str
    value: bytes


class Outbox:
    """Numbers, encodes and routes message bodies to their destinations' topics."""

    def __init__(self, config: SimConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._topics = {d.name: d.topic for d in config.destinations}
        self.msnr: dict[str, int] = dict.fromkeys(self._topics, 0)
        self.closed: set[str] = set()
        self._held: dict[str, list[tuple[str, Body, Encoding]]] = {n: [] for n in self._topics}
        self.on_message: Callable[[str, Body, bytes], bytes | None] | None = None

    def topic(self, destination: str) -> str:
        return self._topics[destination]

    def knows(self, destination: str) -> bool:
        return destination in self._topics

    def send(self, destination: str, key: str, body: Body, encoding: Encoding) -> list[Delivery]:
        """Send (or hold, when the destination is closed) one message body."""
        if destination in self.closed:
            self._held[destination].append((key, body, encoding))
            return []
        return self._deliver(destination, key, body, encoding)

    def _deliver(
        self, destination: str, key: str, body: Body, encoding: Encoding
    ) -> list[Delivery]:
        self.msnr[destination] += 1
        value = self.encode(destination, body, encoding)
        if self.on_message is not None:
            changed = self.on_message(destination, body, value)
            if changed is None:
                return []  # lost in transport: the msnr is used up, the message is gone
            value = changed
        return [Delivery(self._topics[destination], key, value)]

    def encode(self, destination: str, body: Body, encoding: Encoding) -> bytes:
        header = make_element(
            "URBH",
            urbhmsnr=self.msnr[destination],
            urbhtime=stck(self._clock.now()),
            urbhrpid=self._config.replicator_id,
            urbhname=self._config.replicator_name,
        )
        ebcdic = encoding == "ebcdic"
        elements = [p.element() for p in body]
        return encode_message(header, elements, ebcdic=ebcdic, big_endian=ebcdic)

    def close(self, destination: str) -> None:
        self.closed.add(destination)

    def open(self, destination: str) -> list[Delivery]:
        """Open a destination and send what it held meanwhile, in order."""
        self.closed.discard(destination)
        held, self._held[destination] = self._held[destination], []
        out: list[Delivery] = []
        for key, body, encoding in held:
            out.extend(self._deliver(destination, key, body, encoding))
        return out

    def restart(self) -> None:
        """After a replicator restart message numbering starts again at 1 (rule 16)."""
        self.msnr = dict.fromkeys(self._topics, 0)
