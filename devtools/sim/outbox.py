"""Where messages leave the replicator: per-destination numbering, open/closed, encoding.

URBHMSNR counts per destination (rule 1.5 of the seed) in the order messages are handed to the
messaging system, and a closed destination holds its messages until it is opened again (the
way a replicator with an SLOG keeps them), numbering them when they are finally sent.

The Kafka key is what the MQ source connector writes (``SimConfig.kafka_key``): none by
default (the IBM MQ source connector's default record builder sets no key), the MQ message id
as that connector writes it with ``mq.record.builder.key.header=JMSMessageID``: the 24-byte
MQMD.MsgId as 48 lowercase hex characters (its README: "As strings, the connector represents
them using a sequence of 48 hexadecimal characters"; the JMS id without ``ID:``, serialised by
the StringConverter it recommends), or the old convenience of the subscription name. The
outbox keeps each destination's last delivered messages, for a connector that produces them
again (faults.py, ``redeliver``).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from devtools.sim.clock import Clock, stck
from devtools.sim.elements import Part
from devtools.sim.model import Encoding, SimConfig
from pipeline.urb import encode_message, make_element

Body = list[Part]


_STAMP = {True: struct.Struct(">IQ"), False: struct.Struct("<IQ")}
_MSNR_AT = 16  # URBHMSNR, then URBHTIME: fixed offsets of the URBH DSECT


def _restamp(message: bytes, msnr: int, time: int, *, big_endian: bool) -> bytes:
    """The same message with another URBHMSNR and URBHTIME."""
    data = bytearray(message)
    _STAMP[big_endian].pack_into(data, _MSNR_AT, msnr, time)
    return bytes(data)


QUEUE_MANAGER = "QMREPTOR"  # the queue manager the replicator's destination queues live on


def mq_msgid(number: int) -> bytes:
    """The MQMD.MsgId a queue manager gives the ``number``-th message: "AMQ ", the queue
    manager's name in 12 bytes, 8 bytes unique to it (the connector's own test data,
    SequenceStateClientIT: 414d5120 4d59514d4752202020202020 33056b6401d51010)."""
    return b"AMQ " + QUEUE_MANAGER.encode("ascii").ljust(12) + number.to_bytes(8, "big")


class Delivery(NamedTuple):
    """One Kafka record: topic (the destination's), key (None: no key), value (one replicator
    message); ``delay_ms``: the connector holds it that long before producing it (a stall;
    its URBHTIME is when the replicator sent it), and everything after it waits;
    ``lag_ms``: the connector of its topic produces it that much later, what follows on that
    topic waits behind it, other topics do not (a lagging data topic: a delayed resend)."""

    topic: str
    key: bytes | None
    value: bytes
    delay_ms: int = 0
    lag_ms: int = 0


class Outbox:
    """Numbers, encodes and routes message bodies to their destinations' topics."""

    def __init__(self, config: SimConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._topics = {d.name: d.topic for d in config.destinations}
        self.msnr: dict[str, int] = dict.fromkeys(self._topics, 0)
        self.closed: set[str] = set()
        self._held: dict[str, list[tuple[str, Body, Encoding]]] = {n: [] for n in self._topics}
        self._last: tuple[Body, Encoding, bytes] | None = None
        self.on_message: Callable[[str, Body, bytes], bytes | None] | None = None
        self.delay_next_ms = 0  # set by the transport: the next delivery is held this long
        self.history: dict[str, deque[Delivery]] = {
            n: deque(maxlen=config.redelivery_max_messages) for n in self._topics}
        self._msgids = 0

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
        delay, self.delay_next_ms = self.delay_next_ms, 0
        delivery = Delivery(self._topics[destination], self._kafka_key(key), value, delay)
        self.history[destination].append(delivery)
        return [delivery]

    def _kafka_key(self, name: str) -> bytes | None:
        """The record key the connector writes (module docstring)."""
        mode = self._config.kafka_key
        if mode == "subscription":
            return name.encode()
        if mode == "msgid":
            self._msgids += 1
            return mq_msgid(self._msgids).hex().encode("ascii")
        return None

    def redeliver(self, destination: str, count: int) -> list[Delivery]:
        """The last ``count`` messages delivered to ``destination``, again, byte for byte."""
        history = list(self.history[destination])
        return [d._replace(delay_ms=0, lag_ms=0) for d in history[-count:]]

    def forget(self, destination: str, delivery: Delivery) -> None:
        """A delivered message lost after all (in transport): no connector produces it."""
        history = self.history[destination]
        for i, kept in enumerate(history):
            if kept is delivery:
                del history[i]
                return

    def encode(self, destination: str, body: Body, encoding: Encoding) -> bytes:
        """The message for one destination; a body sent to several is encoded only once."""
        msnr, time = self.msnr[destination], stck(self._clock.now())
        last = self._last
        if last is not None and last[0] is body and last[1] == encoding:
            return _restamp(last[2], msnr, time, big_endian=encoding == "ebcdic")
        header = make_element(
            "URBH",
            urbhmsnr=msnr,
            urbhtime=time,
            urbhrpid=self._config.replicator_id,
            urbhname=self._config.replicator_name,
        )
        ebcdic = encoding == "ebcdic"
        elements = [p.element() for p in body]
        value = encode_message(header, elements, ebcdic=ebcdic, big_endian=ebcdic)
        self._last = (body, encoding, value)
        return value

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
