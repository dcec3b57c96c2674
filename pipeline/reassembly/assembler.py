"""Assembly of one transaction from URBT through URBR/URBD (and URBC continuations) to URBE.

Pure bookkeeping on a ``Partial``: every function checks one element against what must come
next and returns an error text instead of raising, so the machine decides what an error
means (quarantine, lost continuation, gap). Nothing here knows about the sequence or gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.reassembly.events import ImageOut, Origin, RecordOut, TransactionComplete
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.sequence import fingerprint

# URBT fields kept while the transaction is open (all ints; flags as 0/1, token separate).
HEAD_FIELDS = ("urbtrcnt", "urbtdbid", "urbtttim", "urbtptim", "urbtacod", "urbtwcod", "urbtarc")
HEAD_FLAGS = ("urbtinst", "urbtrsnd", "urbtptrn")


@dataclass(slots=True)
class Partial:
    """A transaction seen from its URBT on, not yet complete."""

    tsnr: int
    head: dict[str, int]
    token: str
    sent_time: int
    topic: str
    first: tuple[int, int]
    last: tuple[int, int]
    cont: bool
    touched_ms: int
    records: list[RecordOut] = field(default_factory=list)
    images: list[ImageOut] = field(default_factory=list)
    dsnr: int = 0          # last URBDDSNR of the current record (0 right after its URBR)
    nimg: int = 0          # URBDs seen for the current record
    nbytes: int = 0        # payload bytes buffered
    msnrs: list[int] = field(default_factory=list)  # URBHMSNR of the messages it came in
    last_sent: int = 0     # URBHTIME (raw STCK) of the last message it came in
    stalled: bool = False  # reported lost on processing time; kept for a late continuation
    #: its URBT's message was sent after every message seen on the destination before it
    #: (replicator time): no copy the transport delivered again (``sequence.Sequence.fresh``)
    fresh: bool = False

    @property
    def rcnt(self) -> int:
        return self.head["urbtrcnt"]

    @property
    def resend(self) -> bool:
        """A prior-transaction resend: its after images are not in the resend buffer."""
        return bool(self.head["urbtptrn"])

    @property
    def flagged(self) -> bool:
        """The replicator says it may have sent this before (URBTRSND or URBTPTRN)."""
        return bool(self.head["urbtrsnd"] or self.head["urbtptrn"])

    @property
    def fp(self) -> int:
        return fingerprint(self.head["urbtttim"], self.rcnt, self.head["urbtdbid"])


def start(row: ElementRow, now_ms: int, newest_sent: int = 0) -> Partial:
    """Open a transaction at its URBT; ``newest_sent``: the newest URBHTIME seen on the
    destination before this message (raw STCK)."""
    head = {name: row.num(name) for name in HEAD_FIELDS}
    head.update({name: int(row.flag(name)) for name in HEAD_FLAGS})
    coords = (row.partition, row.offset)
    return Partial(
        tsnr=row.num("urbttsnr"), head=head, token=row.char("urbtrtok"),
        sent_time=row.urbhtime, topic=row.topic, first=coords, last=coords,
        cont=row.flag("urbtcont"), touched_ms=now_ms, msnrs=[row.urbhmsnr],
        last_sent=row.urbhtime, fresh=row.home and row.urbhtime > newest_sent,
    )


def urbt_fingerprint(row: ElementRow) -> int:
    """Fingerprint straight from a URBT row, to drop a duplicate before buffering it."""
    return fingerprint(row.num("urbtttim"), row.num("urbtrcnt"), row.num("urbtdbid"))


def _record_done(p: Partial) -> bool:
    """All URBDs of the current record are in (a resend may lack its after images)."""
    if not p.records:
        return True
    dcnt = p.records[-1].dcnt
    return p.nimg <= dcnt if p.resend else p.nimg == dcnt


def add_record(p: Partial, row: ElementRow) -> str | None:
    """Append a URBR; it must be the next rsnr and follow a finished record."""
    rsnr = row.num("urbrrsnr")
    if len(p.records) >= p.rcnt:
        return f"URBR rsnr {rsnr} beyond URBTRCNT {p.rcnt}"
    if rsnr != len(p.records) + 1:
        return f"URBR rsnr {rsnr} where rsnr {len(p.records) + 1} was expected"
    if not _record_done(p):
        prev = p.records[-1]
        return f"record {prev.rsnr} has {p.nimg} URBDs, URBRDCNT says {prev.dcnt}"
    p.records.append(RecordOut(
        rsnr=rsnr, fnr=row.num("urbrfnr"), isn=row.num("urbrisn"), type=row.char("urbrtyp"),
        resend=row.flag("urbrrsnd"), rsp=row.num("urbrrsp"), subcode=row.num("urbrsubc"),
        record_time=row.num("urbrtime"), dcnt=row.num("urbrdcnt"), errc=row.char("urbrerrc"),
    ))
    p.dsnr = p.nimg = 0
    _touch(p, row)
    return None


def add_image(p: Partial, row: ElementRow) -> str | None:
    """Append a URBD to the current record; dsnr must follow on (a resend may skip some)."""
    dsnr = row.num("urbddsnr")
    if not p.records:
        return f"URBD dsnr {dsnr} before any URBR"
    rec = p.records[-1]
    in_order = dsnr > p.dsnr if p.resend else dsnr == p.dsnr + 1
    if not in_order or dsnr > rec.dcnt:
        return f"URBD dsnr {dsnr} of record {rec.rsnr} after dsnr {p.dsnr} (URBRDCNT {rec.dcnt})"
    payload = row.payload or b""
    p.images.append(ImageOut(rsnr=rec.rsnr, dsnr=dsnr, image_type=row.char("urbdtyp"),
                             payload=payload))
    p.dsnr = dsnr
    p.nimg += 1
    p.nbytes += len(payload)
    _touch(p, row)
    return None


def continue_with(p: Partial, row: ElementRow, now_ms: int) -> str | None:
    """Check that a URBC continues exactly where the previous message stopped.

    Accepted positions: where the last message stopped (rsnr, dsnr of its last element, dsnr 0
    after a URBR) or where this one continues (the next URBD of the record, or the next record
    with dsnr 0). The elements that follow are checked one by one anyway, so an element lost
    with a whole message can never slip through either reading.
    """
    pos = (row.num("urbcrsnr"), row.num("urbcdsnr"))
    if pos not in continuation_positions(p):
        return f"URBC continues at (rsnr, dsnr) {pos}, transaction stopped at {_stop(p)}"
    p.cont = row.flag("urbccont")
    p.touched_ms = now_ms
    p.msnrs.append(row.urbhmsnr)
    p.last_sent = row.urbhtime
    _touch(p, row)
    return None


def repeats(p: Partial, row: ElementRow) -> bool:
    """The message of ``row`` is one this transaction already came in (a producer retry).

    URBHMSNR numbers messages per destination, so a message carrying a number already used
    by the open transaction is the same message delivered twice, not new data — provided it
    also starts with this transaction: numbering restarts at 1 after a replicator restart
    (which only the destination-wide key sees), so a new transaction can reuse the number.
    """
    if row.urbhmsnr == 0 or row.urbhmsnr not in p.msnrs:
        return False
    if row.eye == "URBT":
        return row.num("urbttsnr") == p.tsnr and urbt_fingerprint(row) == p.fp
    return row.eye == "URBC" and row.num("urbctsnr") == p.tsnr


def _stop(p: Partial) -> tuple[int, int]:
    return (p.records[-1].rsnr, p.dsnr) if p.records else (0, 0)


def continuation_positions(p: Partial) -> set[tuple[int, int]]:
    """Every (rsnr, dsnr) a URBC may carry to continue ``p``."""
    rsnr, dsnr = _stop(p)
    positions = {(rsnr, dsnr), (rsnr + 1, 0)}
    if p.records and dsnr < p.records[-1].dcnt:
        positions.add((rsnr, dsnr + 1))
    return positions


def end_error(p: Partial, row: ElementRow) -> str | None:
    """Check a URBE: same tsnr, URBTRCNT records, and the last record's URBDs all in."""
    tsnr = row.num("urbetsnr")
    if tsnr != p.tsnr:
        return f"URBE tsnr {tsnr} ends transaction {p.tsnr}"
    return counts_error(p)


def counts_error(p: Partial) -> str | None:
    """Why the counts say the transaction is not complete, or None when it is."""
    if len(p.records) != p.rcnt:
        return f"{len(p.records)} URBRs, URBTRCNT says {p.rcnt}"
    if not _record_done(p):
        rec = p.records[-1]
        return f"record {rec.rsnr} has {p.nimg} URBDs, URBRDCNT says {rec.dcnt}"
    return None


def _touch(p: Partial, row: ElementRow) -> None:
    p.last = (row.partition, row.offset)


def finish(p: Partial, key: tuple[str, str], epoch: int, origin: Origin,
           now_ms: int) -> TransactionComplete:
    """The complete transaction as an event."""
    destination, subscription = key
    h = p.head
    return TransactionComplete(
        subscription=subscription, destination=destination, epoch=epoch, tsnr=p.tsnr,
        dbid=h["urbtdbid"], record_count=p.rcnt, commit_time=h["urbtttim"],
        processed_time=h["urbtptim"], sent_time=p.sent_time, initial_state=bool(h["urbtinst"]),
        resent=bool(h["urbtptrn"]), possibly_resent=bool(h["urbtrsnd"]), origin=origin,
        token=p.token, topic=p.topic, first_partition=p.first[0], first_offset=p.first[1],
        last_partition=p.last[0], last_offset=p.last[1], acode=h["urbtacod"],
        wcode=h["urbtwcod"], arc=h["urbtarc"], records=tuple(p.records),
        images=tuple(p.images), at_ms=now_ms,
    )
