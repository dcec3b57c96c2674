"""Message-level evidence: URBHMSNR continuity of a destination, and status-message copies.

URBHMSNR numbers every message the replicator sends to a destination (R1),
restarting at 1 after a replicator restart (R8). A transaction lost in transport shows
as a tsnr gap; a lost *status-only* message (DEAC, LOST, AUTI, INST/CMPL …) has no tsnr, so
the message numbers are its only trace. The destination-wide key sees every message number of
its topic (the decode stage hands it runs of consecutive numbers) and reports a hole.

A connector that re-produces a batch after a failure (at-least-once) delivers byte-identical
copies: a status-only message carries no tsnr or commit time to tell a copy by, so the key
remembers the last messages' (topic, URBHTIME, URBHMSNR). A copy is a message seen before, or
one sent more than ``REORDER_MARGIN_US`` before the newest seen on its topic (a redelivery
from far back). Kafka Connect's producers are not idempotent by default (KAFKA-13759), so a
retried send may be overtaken by the next one within the producer's delivery timeout (120 s by
default): a message within that margin and not seen before is taken as new.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COPY_WINDOW = 1024
REORDER_MARGIN_US = 120_000_000  # Kafka producer delivery.timeout.ms default
_MARGIN_STCK = REORDER_MARGIN_US << 12


@dataclass(slots=True)
class Numbering:
    """The next expected URBHMSNR of one destination; ``restarts`` counts renumberings;
    ``since`` is the URBHTIME (STCK) of the STRT/REST that began the current numbering."""

    next_msnr: int | None = None
    restarts: int = 0
    since: int = 0
    #: the lowest URBHMSNR seen in this numbering: 1 once a STRT/REST began it, else the
    #: first one the job read (a job started on a running destination)
    low: int | None = None

    def on_run(self, first: int, last: int, htime: int = 0) -> tuple[int, int] | None:
        """Messages ``first``..``last`` (the newest sent at ``htime``) arrived in a row;
        returns the hole before them, if any. A run below the expected number is a
        redelivery (or a reordered message): nothing is missing because of it. A run sent
        before the current numbering began is a redelivery of the previous one (a connector
        re-producing a batch from before a restart): its numbers say nothing of this one."""
        if not self._evidence(first, htime):
            return None
        hole = None
        if self.next_msnr is not None and first > self.next_msnr:
            hole = (self.next_msnr, first - 1)
        if self.next_msnr is None or last >= self.next_msnr:
            self.next_msnr = last + 1
        return hole

    def unseen_before(self, first: int, last: int, htime: int = 0) -> bool:
        """Messages ``first``..``last`` lie below every number this numbering showed the job:
        the job never read them, so they are no redelivery of what it landed.

        Either the topic is out of order (a producer without idempotence wrote a retried
        batch after later ones, KAFKA-13759) or a connector delivered again messages from
        before the job's first one. Their transactions are taken for redeliveries by the
        commit-time rule (``sequence.classify``) and not landed: the caller tells the
        operator. Call before :meth:`on_run`; a run reported once is not reported again.
        """
        if not self._evidence(first, htime):
            return False
        if self.low is None:
            self.low = first
            return False
        unseen = last < self.low
        self.low = min(self.low, first)
        return unseen

    def _evidence(self, first: int, htime: int) -> bool:
        """A run says something of this numbering: URBHMSNR set, and not sent before the
        STRT/REST that began it (a redelivery of the previous numbering)."""
        return first > 0 and not (htime and htime < self.since)

    def restart(self, sent: int = 0) -> None:
        """STRT/REST sent at ``sent`` (STCK): numbering starts again at 1."""
        self.next_msnr = None
        self.restarts += 1
        self.since = max(self.since, sent)
        self.low = 1

    def to_obj(self) -> list:
        return [self.next_msnr, self.restarts, self.since, self.low]

    @classmethod
    def from_obj(cls, obj: list | None) -> Numbering:
        return cls(*obj) if obj else cls()


@dataclass(slots=True)
class Copies:
    """Identities ``[topic, URBHTIME, URBHMSNR]`` of the last status-only messages.

    ``seen`` is the state (serialized, compared); ``_ids`` and ``_newest`` index it so a
    check costs O(1), not a scan of the window: a busy key meets a status every few
    messages (the simulator's 2 % C5 rate), and a scan of the window would be a fifth of its
    state task's time."""

    seen: list[list] = field(default_factory=list)
    _ids: dict[tuple, int] = field(default_factory=dict, init=False, repr=False,
                                   compare=False)
    _newest: dict[str, int] = field(default_factory=dict, init=False, repr=False,
                                    compare=False)

    def __post_init__(self) -> None:
        for topic, htime, msnr in self.seen:
            self._index(topic, htime, msnr)

    def is_copy(self, topic: str, htime: int, msnr: int) -> bool:
        """A message seen before, or sent long before the newest one seen on its topic."""
        if not htime:
            return False  # no URBHTIME: no evidence
        if (topic, htime, msnr) in self._ids:
            return True
        newest = self._newest.get(topic)
        return newest is not None and htime < newest - _MARGIN_STCK

    def add(self, topic: str, htime: int, msnr: int) -> None:
        if not htime:
            return
        self.seen.append([topic, htime, msnr])
        self._index(topic, htime, msnr)
        excess = len(self.seen) - COPY_WINDOW
        if excess <= 0:
            return
        dropped, self.seen[:excess] = self.seen[:excess], []
        stale = False
        for old_topic, old_htime, old_msnr in dropped:
            ident = (old_topic, old_htime, old_msnr)
            if self._ids[ident] == 1:
                del self._ids[ident]
            else:
                self._ids[ident] -= 1
            stale |= old_htime == self._newest.get(old_topic)
        if stale:  # the newest of a topic left the window (rare: times mostly grow)
            self._newest.clear()
            for s_topic, s_htime, _ in self.seen:
                self._newest[s_topic] = max(self._newest.get(s_topic, 0), s_htime)

    def _index(self, topic: str, htime: int, msnr: int) -> None:
        ident = (topic, htime, msnr)
        self._ids[ident] = self._ids.get(ident, 0) + 1
        self._newest[topic] = max(self._newest.get(topic, 0), htime)

    def to_obj(self) -> list[list]:
        return self.seen

    @classmethod
    def from_obj(cls, obj: list | None) -> Copies:
        return cls([list(s) for s in obj or []])
