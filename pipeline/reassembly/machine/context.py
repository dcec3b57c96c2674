"""The working context of one step: the key's state being changed, the conf, the key, the
step's time and the events made so far — and the one place that fills key, epoch and time
into every event (``make``/``emit``), so no rule repeats them."""

from __future__ import annotations

from typing import Any, TypeVar

from pipeline.reassembly import assembler
from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import Event
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.state import KeyState

E = TypeVar("E")


class Context:
    """State, conf, key and time of one step, and its events. The concern classes of the
    machine (``messages``, ``statuses``, ``placing``, ``gapwork``, ``landing``,
    ``failures``, ``timers``) derive from it and are joined into one run (``run._Run``):
    each rule is a method of its concern, and a rule of one concern calls another's by
    name."""

    def __init__(self, st: KeyState, config: ReassemblyConfig, key: tuple[str, str],
                 now_ms: int) -> None:
        self.st, self.config, self.key, self.now = st, config, key, now_ms
        self.destination, self.subscription = key
        self.events: list[Event] = []
        # The message at hand started with a URBC that continued the open transaction.
        self.resumed = False
        # (dbid, fnr) -> (ISNs, tsnrs) that resends landed in this step left unverified.
        self.unverified: dict[tuple[int, int], tuple[set[int], set[int]]] = {}
        # When the message at hand was sent (Unix ms): the storm breaker's clock.
        self.sent_ms: int | None = None

    def make(self, cls: type[E], **fields: Any) -> E:
        """An event of this key: subscription and destination filled in, the epoch and the
        time (``at_ms``) too unless given."""
        fields.setdefault("epoch", self.st.epoch)
        fields.setdefault("at_ms", self.now)
        return cls(subscription=self.subscription, destination=self.destination, **fields)

    def emit(self, cls: type[Any], **fields: Any) -> None:
        """``make`` an event and add it to the step's."""
        self.events.append(self.make(cls, **fields))


def tsnr_of(row: ElementRow) -> int:
    """The tsnr a URBT or URBC names."""
    return row.num("urbctsnr") if row.eye == "URBC" else row.num("urbttsnr")


def coordinates(row: ElementRow | None, p: assembler.Partial | None) -> tuple[str, int, int]:
    """Kafka coordinates to report: the row at hand, else where the transaction began."""
    if row is not None:
        return row.topic, row.partition, row.offset
    if p is not None:
        return p.topic, p.first[0], p.first[1]
    return "", -1, -1
