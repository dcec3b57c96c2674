"""Hand-made URB element rows for the reassembly tests.

A transaction is described by a ``TxnSpec``; ``elements`` turns it into the URBT … URBE element
list the replicator would send; ``Feed`` cuts element lists into Kafka messages (inserting the
URBC a continuation message starts with) and numbers offsets like a Kafka partition would.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from pipeline.reassembly.rows import PSEUDO_INDEX, TICK_EYE, ElementRow

SUB, DEST = "COLOR", "OUT1"
KEY = (DEST, SUB)
STCK_2004 = 0xBB57F5D2AEE40D22  # 2004-06-09 15:22:52.385856 UTC
#: ``TxnSpec.later`` for the transactions of a new epoch: well after every earlier one.
RESTARTED = 10**10


def stck(us_after: int) -> int:
    """A STCK value ``us_after`` microseconds after the seed's example commit time."""
    return STCK_2004 + (us_after << 12)


@dataclass(frozen=True)
class Elem:
    eye: str
    fields: dict
    payload: bytes | None = None
    data: bytes | None = None


@dataclass(frozen=True)
class TxnSpec:
    """A transaction: ``records`` is one tuple of (image type, payload) per record."""

    tsnr: int
    records: tuple[tuple[tuple[str, bytes], ...], ...] = ((("A", b"after-1"),),)
    rsnd: bool = False
    ptrn: bool = False
    inst: bool = False
    token: str = ""
    dbid: int = 10006
    ttim: int | None = None
    # Commit times follow tsnrs (the replicator sends in commit order); after a restart the
    # numbering starts again but time goes on: ``later`` shifts the default commit time.
    later: int = 0
    dcnts: tuple[int, ...] | None = None  # override URBRDCNT per record (inconsistency tests)
    rcnt: int | None = None               # override URBTRCNT
    acode: int = 819
    wcode: int = 4091
    arc: int = 9

    @property
    def commit_time(self) -> int:
        return self.ttim if self.ttim is not None else stck(self.later + self.tsnr * 1000)


def txn(tsnr: int, n_records: int = 1, images: Sequence[str] = ("B", "A"), size: int = 8,
        **kw: object) -> TxnSpec:
    """A transaction of ``n_records`` records, each with ``images`` of ``size`` bytes."""
    records = tuple(
        tuple((t, f"{tsnr}:{r}:{d}:".encode().ljust(size, b"x")[:size] if size else b"")
              for d, t in enumerate(images, 1))
        for r in range(1, n_records + 1)
    )
    return TxnSpec(tsnr=tsnr, records=records, **kw)  # type: ignore[arg-type]


def resend_of(spec: TxnSpec) -> TxnSpec:
    """The same transaction as the resend buffer returns it: flagged, no after images."""
    return replace(spec, rsnd=True, ptrn=True, ttim=spec.commit_time)


def elements(spec: TxnSpec) -> list[Elem]:
    """URBT, then each URBR followed by its URBDs, then URBE."""
    rcnt = len(spec.records) if spec.rcnt is None else spec.rcnt
    out = [Elem("URBT", {
        "urbtsnam": SUB, "urbttsnr": spec.tsnr, "urbtrcnt": rcnt,
        "urbtttim": spec.commit_time, "urbtptim": spec.commit_time + (500 << 12),
        "urbtdbid": spec.dbid, "urbtrsnd": "Y" if spec.rsnd else "",
        "urbtinst": "Y" if spec.inst else "", "urbtrtok": spec.token, "urbtcont": "",
        "urbtptrn": "Y" if spec.ptrn else "", "urbtacod": spec.acode, "urbtwcod": spec.wcode,
        "urbtarc": spec.arc,
    })]
    for r, images in enumerate(spec.records, 1):
        dcnt = len(images) if spec.dcnts is None else spec.dcnts[r - 1]
        out.append(Elem("URBR", {
            "urbrrsnr": r, "urbrdcnt": dcnt, "urbrfnr": 4, "urbrisn": 100 + r,
            "urbrtime": spec.commit_time - (r << 12), "urbrtyp": "U",
            "urbrrsnd": "Y" if spec.rsnd else "", "urbrrsp": 0, "urbrsubc": 0, "urbrerrc": "",
        }))
        for d, (kind, payload) in enumerate(images, 1):
            if spec.ptrn and kind == "A":
                continue  # the resend buffer keeps no after images
            out.append(Elem("URBD", {"urbddsnr": d, "urbdtyp": kind,
                                     "urbdlend": len(payload)}, payload=payload))
    out.append(Elem("URBE", {"urbesnam": SUB, "urbetsnr": spec.tsnr}))
    return out


def status(st: str, rt: str = "", rsp: int = 0, subc: int = 0, tsnr: int = 0,
           snam: str = SUB, dnam: str = "", rtok: str = "", data: bytes | None = None) -> Elem:
    return Elem("URBS", {
        "urbsrtok": rtok, "urbsrt": rt, "urbsst": st, "urbstime": stck(7), "urbsrsp": rsp,
        "urbssubc": subc, "urbserri": "", "urbsinam": "", "urbssnam": snam, "urbsdnam": dnam,
        "urbsptim": 0, "urbsttim": 0, "urbstsnr": tsnr, "urbsdbid": 10006, "urbsfnr": 4,
    }, data=data)


def trsp(tsnr: int, subc: int, rsp: int = 131, rtok: str = "") -> Elem:
    """A reply to a TRAN request."""
    return status("TRSP", rt="TRAN", rsp=rsp, subc=subc, tsnr=tsnr, rtok=rtok)


def _position(elem: Elem, convention: str, previous: Elem) -> tuple[int, int]:
    """(rsnr, dsnr) a URBC carries when a message is cut right before ``elem``."""
    target = elem if convention == "next" else previous
    f = target.fields
    if target.eye == "URBR":
        return (f["urbrrsnr"], 0)
    if target.eye == "URBD":
        return (_rsnr_of(target), f["urbddsnr"])
    if target.eye == "URBE":
        return (_last_rsnr(target), 0)
    return (0, 0)  # URBT


def _rsnr_of(elem: Elem) -> int:
    return elem.fields["_rsnr"]


def _last_rsnr(elem: Elem) -> int:
    return elem.fields["_rsnr"] + 1


@dataclass
class Feed:
    """One Kafka partition of one destination topic: numbers offsets and URBHMSNR."""

    topic: str = "replicator.out1"
    partition: int = 0
    offset: int = 0
    msnr: int = 1
    time: int = field(default_factory=lambda: stck(1_000_000))
    convention: str = "next"

    def message(self, elems: Iterable[Elem], msnr: int | None = None) -> list[ElementRow]:
        """One Kafka message holding ``elems`` (``msnr``: repeat an earlier message's number)."""
        rows = [
            ElementRow(
                topic=self.topic, partition=self.partition, offset=self.offset, elem_index=i,
                urbhmsnr=self.msnr if msnr is None else msnr, urbhtime=self.time, eye=e.eye,
                fields={k: v for k, v in e.fields.items() if not k.startswith("_")},
                payload=e.payload, data=e.data)
            for i, e in enumerate(elems)
        ]
        self.offset += 1
        self.msnr += msnr is None
        self.time += 1000 << 12
        return rows

    def send(self, *specs: TxnSpec, cuts: Iterable[int] = ()) -> list[ElementRow]:
        """Whole transactions in a stream cut into messages before the given element indexes.

        Index 0 is the first element of the first transaction; with no cuts everything goes in
        one message. A message starting inside a transaction begins with the URBC for it.
        """
        stream = _annotated([e for s in specs for e in elements(s)])
        bounds = sorted({c for c in cuts if 0 < c < len(stream)})
        chunks = [stream[a:b] for a, b in zip([0, *bounds], [*bounds, len(stream)], strict=True)]
        return [row for msg in self._with_continuations(stream, chunks) for row in
                self.message(msg)]

    def _with_continuations(self, stream: list[Elem], chunks: list[list[Elem]]) -> list[list[Elem]]:
        out: list[list[Elem]] = []
        pos = 0
        for chunk in chunks:
            msg = list(chunk)
            if chunk[0].eye != "URBT":
                head = _urbt_before(stream, pos)
                rsnr, dsnr = _position(chunk[0], self.convention, stream[pos - 1])
                msg.insert(0, Elem("URBC", {"urbcsnam": SUB, "urbctsnr": head.fields["urbttsnr"],
                                            "urbcrsnr": rsnr, "urbcdsnr": dsnr, "urbccont": ""}))
            out.append(msg)
            pos += len(chunk)
        _set_continuation_flags(out)
        return out


def _annotated(stream: list[Elem]) -> list[Elem]:
    """Copy elements, remembering each URBD's record number (and a URBE's last record)."""
    out, rsnr = [], 0
    for e in stream:
        if e.eye == "URBT":
            rsnr = 0
        elif e.eye == "URBR":
            rsnr = e.fields["urbrrsnr"]
        fields = dict(e.fields)
        if e.eye in ("URBD", "URBE"):
            fields["_rsnr"] = rsnr
        out.append(Elem(e.eye, fields, e.payload, e.data))
    return out


def _urbt_before(stream: list[Elem], pos: int) -> Elem:
    return next(e for e in reversed(stream[:pos]) if e.eye == "URBT")


def _set_continuation_flags(msgs: list[list[Elem]]) -> None:
    """URBTCONT/URBCCONT='Y' when the transaction's last element of a message is not URBE."""
    for msg in msgs:
        last_open = next((e for e in reversed(msg) if e.eye in ("URBT", "URBC")), None)
        if last_open is None or msg[-1].eye == "URBE":
            continue
        last_open.fields["urbtcont" if last_open.eye == "URBT" else "urbccont"] = "Y"


def redeliver(feed: Feed, msg: list[ElementRow]) -> list[ElementRow]:
    """The same message again at a new offset, byte for byte (its URBHMSNR and URBHTIME
    too), as a producer retry or a connector's re-produced batch delivers it."""
    rows = [r._replace(offset=feed.offset) for r in msg]
    feed.offset += 1
    return rows


def tick(feed: Feed, htime: int) -> ElementRow:
    """The decode stage's destination tick after the feed's last message: the newest
    URBHTIME seen on the topic (other subscriptions' messages included)."""
    return ElementRow(feed.topic, feed.partition, max(feed.offset - 1, 0), PSEUDO_INDEX, 0, 0,
                      TICK_EYE, {"htime": htime})


def statuses(feed: Feed, *elems: Elem) -> list[ElementRow]:
    """Status elements, one message each."""
    return [row for e in elems for row in feed.message([e])]


class Harness:
    """Drives ``step`` like the Spark glue would: keeps state (through bytes), time, events."""

    def __init__(self, config: object = None, now_ms: int = 1_000_000,
                 roundtrip: bool = True, key: tuple[str, str] = KEY) -> None:
        """``key``: (destination, subscription); subscription "" is the destination-wide key
        (message numbers, status messages naming no subscription)."""
        from pipeline.reassembly.config import ReassemblyConfig

        self.config = config if config is not None else ReassemblyConfig()
        self.now = now_ms
        self.roundtrip = roundtrip
        self.state = None
        self.state_bytes: bytes | None = None
        self.events: list = []
        self.timeout: int | None = None
        self.key = key

    def feed(self, rows: Iterable[ElementRow], now_ms: int | None = None) -> list:
        """One batch; returns its events."""
        from pipeline.reassembly.machine import step
        from pipeline.reassembly.state import KeyState

        if now_ms is not None:
            self.now = now_ms
        state = KeyState.from_bytes(self.state_bytes) if self.roundtrip and self.state_bytes \
            else self.state
        result = step(state, list(rows), self.now, self.config, self.key)  # type: ignore[arg-type]
        assert result.next_timeout_ms is None or result.next_timeout_ms > self.now
        self.state = result.state
        self.state_bytes = result.state.to_bytes() if result.state is not None else None
        self.timeout = result.next_timeout_ms
        self.events.extend(result.events)
        return result.events

    def tick(self, now_ms: int) -> list:
        """A batch with no rows for this key (a timer fired)."""
        return self.feed([], now_ms)

    def fire(self) -> list:
        """Advance time exactly to the armed timeout and run it."""
        assert self.timeout is not None, "no timer armed"
        return self.tick(self.timeout)

    def of(self, cls: type, events: list | None = None) -> list:
        return [e for e in (self.events if events is None else events) if isinstance(e, cls)]

    def landed(self, events: list | None = None) -> list[int]:
        from pipeline.reassembly.events import TransactionComplete

        return [e.tsnr for e in self.of(TransactionComplete, events)]
