"""Per-key state and its compact, versioned serialisation (a binary column in Spark state).

Layout of ``to_bytes``: ``b"RA"`` + format version byte + zlib( 4-byte JSON length + JSON +
payload blob ). Image payloads are not base64'd into the JSON but appended raw to the blob and
referenced by (offset, length), which keeps large partial transactions cheap to store.
"""

from __future__ import annotations

import copy
import json
import struct
import zlib
from dataclasses import dataclass, field, fields

from pipeline.reassembly.assembler import Partial
from pipeline.reassembly.events import ImageOut, RecordOut, TransactionComplete
from pipeline.reassembly.gaps import Gap
from pipeline.reassembly.initial_state import InstState
from pipeline.reassembly.numbering import Copies, Numbering
from pipeline.reassembly.sequence import DupWindow
from pipeline.reassembly.settled import GivenUp
from pipeline.reassembly.stat import StatTrack
from pipeline.reassembly.storm import Storm

MAGIC = b"RA"
VERSION = 1
DEFAULT_WINDOW = 1024
EPOCH_STARTS = 16


@dataclass(slots=True)
class KeyState:
    """Everything remembered for one (destination, subscription) between batches.

    Bounded: one partial transaction, open gaps (each at most ``max_requests_per_gap``
    positions, at most ``max_open_gaps`` of them), held transactions (capped by
    ``max_buffered_bytes``), a fixed-size duplicate window, a few counters, at most
    ``initial_state.MAX_TRACKED`` open INST requests, ``settled.MAX_RANGES`` ranges of
    tsnrs given up and ``numbering.COPY_WINDOW`` status-message identities.
    """

    epoch: int = 0
    next_u: int | None = None      # unwrapped next expected tsnr; None before the first one
    #: the first position placed in the epoch (1 after a restart; the first tsnr read when
    #: the job began on a running subscription): a tsnr below it was never landed here
    base_u: int | None = None
    epoch_fresh: bool = True       # nothing seen since the epoch began (a repeated STRT is a no-op)
    window: DupWindow = field(default_factory=lambda: DupWindow(DEFAULT_WINDOW))
    partial: Partial | None = None
    discard: int | None = None     # tsnr whose remaining elements are skipped
    gaps: list[Gap] = field(default_factory=list)
    held: list[tuple[int, TransactionComplete]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    inst: InstState = field(default_factory=InstState)  # INST requests asked and tracked
    newest_sent_ms: int | None = None  # newest URBHTIME (Unix ms, UTC) seen on the destination
    newest_sent: int = 0               # the same, raw STCK (restarts compare to the tick)
    #: STCK (replicator time) the epoch began at: its STRT/REST, or just after the newest
    #: message seen before a new message numbered from 1 again (0: no restart seen)
    epoch_time: int = 0
    #: [epoch, epoch_time] of the epochs before this one, newest last (at most EPOCH_STARTS):
    #: which epoch a message sent before this one began belongs to
    epoch_starts: list[list[int]] = field(default_factory=list)
    given_up: GivenUp = field(default_factory=GivenUp)  # settled tsnrs of ended gaps
    storm: Storm = field(default_factory=Storm)
    stat: StatTrack = field(default_factory=StatTrack)
    numbering: Numbering = field(default_factory=Numbering)  # the destination-wide key's
    copies: Copies = field(default_factory=Copies)  # status-only messages seen

    def clone(self) -> KeyState:
        """A deep copy, so ``step`` never changes the state object it was given."""
        return copy.deepcopy(self)

    def is_empty(self) -> bool:
        """Nothing worth keeping: the state Spark may drop (a key that only ever saw a GFFT
        keeps nothing, not even the time it was sent)."""
        return self == KeyState(window=DupWindow(self.window.size),
                                newest_sent_ms=self.newest_sent_ms,
                                newest_sent=self.newest_sent)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def take_partial_images(self) -> list[ImageOut]:
        """The open transaction's images, taken out of the state: a store that keeps them in
        a list of their own (``state_tws``) saves the rest without them; the images arrive
        again with the transaction's completion event from that list."""
        if self.partial is None or not self.partial.images:
            return []
        images, self.partial.images = self.partial.images, []
        return images

    def buffered_bytes(self) -> int:
        held = sum(len(i.payload) for _, t in self.held for i in t.images)
        return held + (self.partial.nbytes if self.partial else 0)

    def to_bytes(self) -> bytes:
        blob = bytearray()
        doc = {
            "epoch": self.epoch, "next_u": self.next_u, "fresh": self.epoch_fresh,
            "base": self.base_u,
            "wsize": self.window.size, "window": _put(blob, self.window.to_obj()),
            "wepoch": self.window.epoch, "wcurrent": self.window.current,
            "partial": _partial_obj(self.partial, blob) if self.partial else None,
            "discard": self.discard, "gaps": [g.to_obj() for g in self.gaps],
            "held": [[u, _txn_obj(t, blob)] for u, t in self.held],
            "counters": self.counters, "inst": self.inst.to_obj(),
            "sent_ms": self.newest_sent_ms, "sent": self.newest_sent,
            "epoch_time": self.epoch_time, "epoch_starts": self.epoch_starts,
            "given_up": self.given_up.to_obj(), "storm": self.storm.to_obj(),
            "stat": self.stat.to_obj(), "numbering": self.numbering.to_obj(),
            "copies": self.copies.to_obj(),
        }
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        body = struct.pack(">I", len(text)) + text + bytes(blob)
        return MAGIC + bytes([VERSION]) + zlib.compress(body, 1)  # rewritten every batch: fast

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyState:
        if data[:2] != MAGIC or data[2] != VERSION:
            raise ValueError(f"not a reassembly state of version {VERSION}")
        body = zlib.decompress(data[3:])
        (n,) = struct.unpack_from(">I", body)
        doc = json.loads(body[4:4 + n])
        blob = memoryview(body)[4 + n:]
        partial = doc["partial"]
        return cls(
            epoch=doc["epoch"], next_u=doc["next_u"], epoch_fresh=doc["fresh"],
            base_u=doc.get("base"),  # absent in states written before: no evidence
            window=DupWindow.from_obj(doc["wsize"], _get(blob, doc["window"]),
                                      doc.get("wepoch", doc["epoch"]), doc.get("wcurrent")),
            partial=_partial_from(partial, blob) if partial else None,
            discard=doc["discard"], gaps=[Gap.from_obj(g) for g in doc["gaps"]],
            held=[(u, _txn_from(t, blob)) for u, t in doc["held"]],
            counters=dict(doc["counters"]),
            inst=InstState.from_obj(doc.get("inst")),  # absent in states written before INST
            newest_sent_ms=doc.get("sent_ms"), newest_sent=doc.get("sent", 0),
            epoch_time=doc.get("epoch_time", 0),
            epoch_starts=[list(e) for e in doc.get("epoch_starts", [])],
            given_up=GivenUp.from_obj(doc.get("given_up")),
            storm=Storm.from_obj(doc.get("storm")), stat=StatTrack.from_obj(doc.get("stat")),
            numbering=Numbering.from_obj(doc.get("numbering")),
            copies=Copies.from_obj(doc.get("copies")),
        )


def _put(blob: bytearray, data: bytes) -> list[int]:
    blob.extend(data)
    return [len(blob) - len(data), len(data)]


def _get(blob: memoryview, ref: list[int]) -> bytes:
    return bytes(blob[ref[0]:ref[0] + ref[1]])


def _records_obj(records: list[RecordOut] | tuple[RecordOut, ...]) -> list[list]:
    return [list(r) for r in records]


def _images_obj(images: list[ImageOut] | tuple[ImageOut, ...], blob: bytearray) -> list[list]:
    return [[i.rsnr, i.dsnr, i.image_type, _put(blob, i.payload)] for i in images]


def _images_from(objs: list[list], blob: memoryview) -> list[ImageOut]:
    return [ImageOut(r, d, t, _get(blob, ref)) for r, d, t, ref in objs]


_PARTIAL_PLAIN = ("tsnr", "head", "token", "sent_time", "topic", "first", "last", "cont",
                  "touched_ms", "dsnr", "nimg", "nbytes", "msnrs", "last_sent", "stalled",
                  "fresh")


def _partial_obj(p: Partial, blob: bytearray) -> dict:
    obj = {name: getattr(p, name) for name in _PARTIAL_PLAIN}
    obj["records"] = _records_obj(p.records)
    obj["images"] = _images_obj(p.images, blob)
    return obj


def _partial_from(obj: dict, blob: memoryview) -> Partial:
    plain = {name: obj[name] for name in _PARTIAL_PLAIN if name in obj}
    plain["first"], plain["last"] = tuple(plain["first"]), tuple(plain["last"])
    return Partial(**plain, records=[RecordOut(*r) for r in obj["records"]],
                   images=_images_from(obj["images"], blob))


def _txn_obj(t: TransactionComplete, blob: bytearray) -> dict:
    obj = {f.name: getattr(t, f.name) for f in fields(TransactionComplete)}
    obj["records"] = _records_obj(t.records)
    obj["images"] = _images_obj(t.images, blob)
    return obj


def _txn_from(obj: dict, blob: memoryview) -> TransactionComplete:
    obj = dict(obj)
    obj["records"] = tuple(RecordOut(*r) for r in obj["records"])
    obj["images"] = tuple(_images_from(obj["images"], blob))
    return TransactionComplete(**obj)
