"""The replicator's circular resend buffer, used to answer prior-transaction (TRAN) requests.

As the seed says, the buffer keeps the URBT and URBRs of a transaction and its before-image
URBDs only; after images are not kept, so a resent transaction never carries them. Newer
transactions overwrite the oldest once the buffer's byte size is used up; several
subscriptions may share one buffer and so compete for its space.
"""

from __future__ import annotations

from collections import OrderedDict

from devtools.sim.elements import element_size
from devtools.sim.transactions import Transaction


def stored_size(tx: Transaction) -> int:
    """Bytes a transaction takes in the buffer: URBT, URBRs, before images, URBE."""
    size = element_size("URBT") + element_size("URBE")
    for record in tx.records:
        size += element_size("URBR")
        if record.before:
            size += element_size("URBD", len(record.before))
    return size


class ResendBuffer:
    """A byte-bounded circular buffer of (subscription, tsnr) -> transaction without AIs."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._entries: OrderedDict[tuple[str, int], tuple[Transaction, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def keep(self, tsnr: int, tx: Transaction) -> None:
        """Store the transaction's resendable part, evicting the oldest while it won't fit."""
        stored = tx.for_resend()
        nbytes = stored_size(stored)
        key = (tx.subscription, tsnr)
        if key in self._entries:
            self.used -= self._entries.pop(key)[1]
        while self._entries and self.used + nbytes > self.size:
            self.used -= self._entries.popitem(last=False)[1][1]
        if nbytes <= self.size:
            self._entries[key] = (stored, nbytes)
            self.used += nbytes

    def find(self, subscription: str, tsnr: int) -> Transaction | None:
        entry = self._entries.get((subscription, tsnr))
        return entry[0] if entry else None

    def tsnrs(self, subscription: str) -> list[int]:
        """The tsnrs of one subscription still held, oldest first."""
        return [t for (s, t) in self._entries if s == subscription]

    def clear(self) -> None:
        """A replicator restart loses the buffer: numbering starts again at 1."""
        self._entries.clear()
        self.used = 0
