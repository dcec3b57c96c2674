"""What the simulator generated, recorded independently of the stream, and what landed.

Why: comparing landed rows with the simulator's own transactions (not with a decode of the
same stream) catches losses and mix-ups anywhere between the packer and the tables.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devtools.sim import Delivery, Replicator
from devtools.sim.clock import stck
from devtools.sim.transactions import Transaction
from pipeline.reassembly import stck_to_datetime
from pipeline.urb import UrbFormatError, decode_message
from tests.support.harness import Tables

# (rsnr, fnr, isn, type) and (rsnr, dsnr, image type, payload)
RecordT = tuple[int, int, int, str]
ImageT = tuple[int, int, str, bytes]


@dataclass(frozen=True)
class Sent:
    """One transaction the simulator committed: its subscription, destinations and tsnr."""

    subscription: str
    destinations: tuple[str, ...]
    tsnr: int
    tx: Transaction
    tod_offset_us: int = 0  # the replicator's TOD clock ahead of UTC

    @property
    def commit_time(self) -> datetime | None:
        """URBTTTIM as the tables hold it (UTC): tells apart two transactions of one tsnr."""
        return stck_to_datetime(stck(self.tx.commit - self.tod_offset_us))

    def records(self) -> list[RecordT]:
        return [(n, r.fnr, r.isn, r.kind) for n, r in enumerate(self.tx.records, start=1)]

    def images(self, resent: bool = False) -> list[ImageT]:
        """Before then after image per record; a resend has no after images."""
        out: list[ImageT] = []
        for rsnr, r in enumerate(self.tx.records, start=1):
            kept = [("B", r.before), ("A", None if resent else r.after)]
            present = [(t, img) for t, img in kept if img]
            out += [(rsnr, dsnr, t, img) for dsnr, (t, img) in enumerate(present, start=1)]
        return out


def generate(rep: Replicator, count: int, *, start: bool = True,
             terminate: bool = True) -> tuple[list[Delivery], list[Sent]]:
    """STRT, ``count`` transactions, TERM — and the transactions as the generator made them."""
    made: list[Transaction] = []
    original = rep.generator.next_transaction

    def recording(sub: Any, clock: Any) -> Transaction:
        tx = original(sub, clock)
        made.append(tx)
        return tx

    rep.generator.next_transaction = recording  # type: ignore[method-assign]
    out: list[Delivery] = rep.start() if start else []
    sent: list[Sent] = []
    try:
        for _ in range(count):
            out += rep.step()
            tx = made[-1]
            sub = rep.config.subscription(tx.subscription)
            assert sub is not None
            sent.append(Sent(sub.name, sub.destinations, rep.states[sub.name].tsnr, tx,
                             rep.config.tod_offset_us))
    finally:
        rep.generator.next_transaction = original  # type: ignore[method-assign]
    out += rep.terminate() if terminate else rep.flush()
    return out, sent


# -- what landed -------------------------------------------------------------------------------

LandedKey = tuple[str, str, int, int]  # destination, subscription, epoch, tsnr


@dataclass
class Landed:
    """One landed transaction with its records and images as the tables hold them."""

    row: dict[str, Any]
    records: list[RecordT]
    images: list[ImageT]


def landed(tables: Tables) -> dict[LandedKey, list[Landed]]:
    """Landed transactions by key; a list, so that landing twice shows up."""
    recs: dict[LandedKey, list[RecordT]] = defaultdict(list)
    imgs: dict[LandedKey, list[ImageT]] = defaultdict(list)
    for r in tables["records"]:
        recs[_key(r)].append((r["rsnr"], r["fnr"], r["isn"], r["type"]))
    for i in tables["images"]:
        imgs[_key(i)].append((i["rsnr"], i["dsnr"], i["image_type"], i["payload"]))
    out: dict[LandedKey, list[Landed]] = defaultdict(list)
    for t in tables["transactions"]:
        k = _key(t)
        out[k].append(Landed(t, sorted(recs[k]), sorted(imgs[k], key=lambda x: x[:2])))
    return out


def _key(row: dict[str, Any]) -> LandedKey:
    return (row["destination"], row["subscription"], row["epoch"], row["tsnr"])


def undecodable(deliveries: Iterable[Delivery]) -> list[Delivery]:
    """Deliveries the codec itself rejects."""
    bad = []
    for d in deliveries:
        try:
            decode_message(d.value)
        except UrbFormatError:
            bad.append(d)
    return bad


def urbt_flags(deliveries: Iterable[Delivery]) -> Counter[tuple[str, str]]:
    """(URBTRSND, URBTPTRN) of every URBT in the deliveries, counted (decodable ones only)."""
    out: Counter[tuple[str, str]] = Counter()
    for d in deliveries:
        try:
            msg = decode_message(d.value)
        except UrbFormatError:
            continue
        for e in msg.elements:
            if e.eye == "URBT":
                out[(e.urbtrsnd or "", e.urbtptrn or "")] += 1
    return out
