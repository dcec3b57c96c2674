"""STAT requests for idle keys: a lost *last* transaction is otherwise never noticed.

A gap shows only when a later tsnr arrives. When the replicator sends nothing more for a while
— the subscription is idle — a transaction lost in transport just before stays unnoticed. The
replicator's STAT request answers that (R12): asked for a subscription
and destination, it sends a URBS STAT/SUBS about that pair *to that destination* (and a copy to
the reply destination) whose URBSTSNR is the last tsnr it sent. The copy on the destination's
own topic is ordered after every transaction sent before it, so when it is processed anything
up to its tsnr that did not arrive is lost; the copy on the reply topic is not ordered with the
data and is only landed.

The key asks once it has been idle for ``stat_interval_ms`` (processing time since its last
data message), and again every interval until a SUBS on its topic answers; after an answer it
asks no more until new data arrives and the key falls idle again.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.reassembly.config import ReassemblyConfig


@dataclass(slots=True)
class StatTrack:
    """When the key last saw data, last asked, and whether a SUBS answered since."""

    last_data_ms: int | None = None
    asked_ms: int | None = None
    answered: bool = False
    seq: int = 0

    def data_seen(self, now_ms: int) -> None:
        self.last_data_ms, self.answered = now_ms, False

    def due_ms(self, config: ReassemblyConfig) -> int | None:
        """When to ask next (None: not at all)."""
        interval = config.stat_interval_ms
        if interval is None or self.answered or self.last_data_ms is None:
            return None
        since = max(self.last_data_ms, self.asked_ms or 0)
        return since + interval

    def ask(self, now_ms: int) -> int:
        """Record a STAT request sent now; returns its sequence number."""
        self.asked_ms = now_ms
        self.seq += 1
        return self.seq

    def to_obj(self) -> list:
        return [self.last_data_ms, self.asked_ms, self.answered, self.seq]

    @classmethod
    def from_obj(cls, obj: list | None) -> StatTrack:
        return cls(*obj) if obj else cls()
