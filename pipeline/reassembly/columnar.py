"""Columnar decode of plain messages: the fast path's reader (see fast.py).

Why: the element decoder builds a dict per element and the state stage an ``ElementRow``
per element, ~40 Python objects per replicator message; that is most of the slow path's cost
per message (decision 0009). Here a batch of messages is one byte buffer: the element chain is
walked for every message at once (one numpy step per element position), and each URBT/URBR/
URBD/URBE field the landing needs is read as a column at its DSECT offset
(``pipeline.urb.layouts``), in the byte order each message's URBHBORD names.

Only *plain* messages are read for landing: those whose elements are exactly
``(URBT (URBR URBD*)* URBE)+``, each long enough for the fields read, the header and chain
well formed (``pipeline.urb.walk``'s rules), URBTRCNT/URBRDCNT/URBRRSNR/URBDDSNR/URBETSNR
consistent, no URBTRSND/URBTPTRN, tsnr not 0 and no transaction's images over the byte cap.
For such a message the element decoder and ``step`` raise nothing and report nothing but
the landed transactions; ``plain`` is False for every other message, which then goes the
slow way. So nothing here words an error: it only has to be sure.

Character fields are taken exactly as the element decoder and ``ElementRow.char`` take
them (the message text in its code page, trailing blanks and zeros removed, then
stripped), by decoding each distinct value once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.urb.codepages import LATIN1_TABLES, check_codepage
from pipeline.urb.layouts import ALL_TABLES, STRIP
from pipeline.urb.native import load_chain_walker
from pipeline.urb.walk import ELEMENT_MIN, FORMS, HEAD_KEYS, form_heads

# element kinds of a plain message (0: anything else)
OTHER, URBT, URBR, URBD, URBE = range(5)
_KIND_OF_EYE = {"URBT": URBT, "URBR": URBR, "URBD": URBD, "URBE": URBE}
#: Which kind may follow which inside a plain message; a message starts with URBT and ends
#: with URBE, so every transaction is whole and in one message.
_FOLLOWS = np.zeros((5, 5), dtype=bool)
for _a, _b in ((URBT, URBR), (URBT, URBE), (URBR, URBR), (URBR, URBD), (URBR, URBE),
               (URBD, URBD), (URBD, URBR), (URBD, URBE), (URBE, URBT)):
    _FOLLOWS[_a, _b] = True

_FIELDS = {(eye, name): (off, typ, length)
           for eye, rows in ALL_TABLES.items() for off, name, typ, length in rows}


def _field(eye: str, name: str) -> tuple[int, str, int]:
    return _FIELDS[(eye, name)]


#: The fields read from each kind; an element must hold all of them (a shorter one, which
#: the element decoder reads with fewer fields, goes the slow way).
READ = {
    "URBH": ("urbhlen", "urbhlent", "urbhmsnr", "urbhtime"),
    "URBT": ("urbttsnr", "urbtrcnt", "urbtttim", "urbtptim", "urbtdbid", "urbtrsnd",
             "urbtinst", "urbtrtok", "urbtarc", "urbtptrn", "urbtacod", "urbtwcod"),
    "URBR": ("urbrrsnr", "urbrdcnt", "urbrfnr", "urbrisn", "urbrtime", "urbrtyp", "urbrrsnd",
             "urbrrsp", "urbrsubc", "urbrerrc"),
    "URBD": ("urbdlenh", "urbdlend", "urbddsnr", "urbdtyp"),
    "URBE": ("urbetsnr",),
}
MIN_LENGTH = {eye: max(sum(_field(eye, n)[::2]) for n in names) for eye, names in READ.items()}
_URBD_FIXED = ALL_TABLES["URBD"][-1][0] + ALL_TABLES["URBD"][-1][3]
_BINARY = {eye: tuple(n for n in names if _field(eye, n)[1] != "C") for eye, names in READ.items()}
_SPARE = 256  # more than any fixed-width read reaches past an offset


@dataclass(frozen=True, slots=True)
class Transactions:
    """The plain messages of a batch and their transactions, column by column.

    Per message (index as given): ``plain``, ``htime`` (URBHTIME; 0 when
    not plain) and ``tx_start``/``tx_end``, the range of its transactions. Per transaction,
    per record and per image: numpy columns named after their DSECT fields, plus the
    decoded character fields and the image payloads as object arrays (str, bytes): sliced
    and joined as numpy, handed to Arrow without a Python list in between.
    """

    plain: np.ndarray
    htime: np.ndarray
    tx_start: np.ndarray
    tx_end: np.ndarray
    tx: dict[str, np.ndarray]
    rec: dict[str, np.ndarray]
    img: dict[str, np.ndarray]
    token: np.ndarray
    rec_type: np.ndarray
    rec_errc: np.ndarray
    img_type: np.ndarray
    payloads: np.ndarray

    def messages(self, start: int, stop: int) -> Transactions:
        """Messages ``start`` to ``stop`` (exclusive) alone, as ``decode`` of just them
        gives them (plainness and every field are a message's own): the fast path decodes
        ahead once and lands the runs between the machine's messages from slices."""
        t0 = int(self.tx_start[start]) if start < len(self.tx_start) else int(
            self.tx_end[-1]) if len(self.tx_end) else 0
        t1 = int(self.tx_end[stop - 1]) if stop > start else t0
        r0, r1 = np.searchsorted(self.rec["tx"], [t0, t1]).tolist()
        i0, i1 = np.searchsorted(self.img["tx"], [t0, t1]).tolist()
        base = np.int64(t0)
        return Transactions(
            plain=self.plain[start:stop], htime=self.htime[start:stop],
            tx_start=self.tx_start[start:stop] - base, tx_end=self.tx_end[start:stop] - base,
            tx={n: v[t0:t1] for n, v in self.tx.items()},
            rec={n: (v[r0:r1] - base if n == "tx" else v[r0:r1]) for n, v in self.rec.items()},
            img={n: (v[i0:i1] - base if n == "tx" else v[i0:i1]) for n, v in self.img.items()},
            token=self.token[t0:t1], rec_type=self.rec_type[r0:r1],
            rec_errc=self.rec_errc[r0:r1], img_type=self.img_type[i0:i1],
            payloads=self.payloads[i0:i1])


def text_table(codepage: str) -> bytes | None:
    """The Latin-1 translate table of an EBCDIC code page (None: not a single-byte page the
    fast path can read; then every message goes the slow way)."""
    try:
        return LATIN1_TABLES.get(check_codepage(codepage))
    except ValueError:
        return None


class _Reader:
    """Reads the fixed part of many elements at once from one buffer: one gather of their
    bytes, then every binary field a view through a structured dtype of the element's DSECT
    in each byte order (no Python per element)."""

    def __init__(self, buf: np.ndarray) -> None:
        self.buf = buf

    def block(self, eye: str, pos: np.ndarray, big: np.ndarray) -> _Block:
        """The fields ``READ[eye]`` of the elements at ``pos`` (message byte order ``big``).

        The rows are taken from a sliding-window view of the buffer (one index per element):
        an index per byte (``pos[:, None] + arange``) built an int64 matrix eight times the
        size of the bytes gathered, a quarter of a decode's time."""
        windows = np.lib.stride_tricks.sliding_window_view(self.buf, MIN_LENGTH[eye])
        return _Block(eye, windows[pos], big)


class _Block:
    """The first ``MIN_LENGTH[eye]`` bytes of many elements of one kind, read by field."""

    def __init__(self, eye: str, raw: np.ndarray, big: np.ndarray) -> None:
        self.eye, self.raw_bytes, self.big = eye, raw, big
        self._be = raw.view(_DTYPES[(eye, ">")]).ravel()
        self._le = raw.view(_DTYPES[(eye, "<")]).ravel()

    def num(self, name: str) -> np.ndarray:
        """A binary field: int64, or uint64 for 8-byte ones (STCK)."""
        value = np.where(self.big, self._be[name], self._le[name])
        return value.astype(np.uint64 if _field(self.eye, name)[2] == 8 else np.int64)

    def raw(self, name: str) -> np.ndarray:
        """A character field's bytes (n × length)."""
        off, _typ, length = _field(self.eye, name)
        return self.raw_bytes[:, off:off + length]


def _dtype(eye: str, order: str) -> np.dtype:
    """The binary fields ``READ[eye]`` of a DSECT as a structured dtype of one byte order."""
    names = _BINARY[eye]
    formats = []
    for name in names:
        _off, typ, length = _field(eye, name)
        formats.append(f"{order}{'i' if typ == 'I' else 'u'}{length}")
    return np.dtype({"names": list(names), "formats": formats,
                     "offsets": [_field(eye, n)[0] for n in names],
                     "itemsize": MIN_LENGTH[eye]})


_DTYPES = {(eye, order): _dtype(eye, order) for eye in READ for order in "<>"}
_EYELEN = {order: np.dtype({"names": ["eye", "len"], "formats": [">u4", f"{order}i4"],
                            "offsets": [0, 4], "itemsize": ELEMENT_MIN}) for order in "<>"}


class _Chars:
    """Character fields as the element decoder and ``ElementRow.char`` give them."""

    def __init__(self, table: bytes) -> None:
        self.table = table
        # a one-character field reads 'Y' only for Y or y (nothing else strips or uppercases
        # to it): built with numpy, as a decode per fast-path resume made 512 ``text`` calls
        # per decode a cost (~1 ms)
        codes = np.stack([np.arange(256, dtype=np.uint8), np.frombuffer(table, np.uint8)])
        self._flags = np.isin(codes, np.array([ord("Y"), ord("y")], dtype=np.uint8))

    def text(self, raw: bytes, ebcdic: bool) -> str:
        data = raw.translate(self.table) if ebcdic else raw
        return data.decode("latin-1").rstrip(STRIP).strip()

    def column(self, raw: np.ndarray, ebcdic: np.ndarray) -> np.ndarray:
        """One string per row of ``raw`` (n × width bytes), each distinct value decoded once
        (an object array).

        Each row and its form flag are one key: a uint64 when they fit in 8 bytes (type
        codes, error codes: sorted as integers, several times faster than as byte strings),
        else a byte string of the row's width."""
        n, width = raw.shape
        if not n:
            return np.zeros(0, dtype=object)
        size = 8 if width < 8 else width + 1
        keyed = np.zeros((n, size), dtype=np.uint8)
        keyed[:, 0] = ebcdic
        keyed[:, 1:width + 1] = raw
        keys = keyed.view(np.uint64 if size == 8 else f"V{size}").ravel()
        uniq, inverse = np.unique(keys, return_inverse=True)
        rows = uniq.view(np.uint8).reshape(len(uniq), size)
        texts = np.array([self.text(row[1:width + 1].tobytes(), bool(row[0])) for row in rows],
                         dtype=object)
        return texts[inverse.ravel()]

    def flag(self, raw: np.ndarray, ebcdic: np.ndarray) -> np.ndarray:
        """One-byte indicators: True only for 'Y' (``ElementRow.flag``)."""
        return self._flags[ebcdic.astype(np.intp), raw[:, 0]]


def _eye_codes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every form's eye-catchers as sorted big-endian uint32s, with their kind and whether
    they are EBCDIC (for ``np.searchsorted``)."""
    found: dict[int, tuple[int, bool]] = {}
    for form in FORMS.values():
        for eyeb, eye in form.eyes.items():
            found[int.from_bytes(eyeb, "big")] = (_KIND_OF_EYE.get(eye, OTHER), form.ebcdic)
    codes = sorted(found)
    return (np.array(codes, dtype=np.uint64), np.array([found[c][0] for c in codes]),
            np.array([found[c][1] for c in codes]))


_EYE_CODES, _EYE_KINDS, _EYE_EBCDIC = _eye_codes()
#: The compiled walk (pipeline/urb/native), loaded once per process; None: not built, the
#: numpy walk runs alone (same arrays: tests/unit/reassembly/test_native_walk.py).
_NATIVE_WALK = load_chain_walker(_EYE_CODES, _EYE_KINDS, _EYE_EBCDIC)


def _forms(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each message's form as the codec reads it (``walk.form_heads``): EBCDIC, big-endian,
    and whether it is at least a URBH long with a header of a known form."""
    count = len(starts)
    ebcdic, big, known = (np.zeros(count, dtype=bool) for _ in range(3))
    index, keys = form_heads(buf, starts, starts + lengths, MIN_LENGTH["URBH"])
    for head, key in HEAD_KEYS.items():
        hit = index[keys == key]
        ebcdic[hit], big[hit], known[hit] = FORMS[head].ebcdic, FORMS[head].big, True
    return ebcdic, big, known


def decode(values: Sequence[bytes], codepage: str, max_buffered_bytes: int) -> Transactions:
    """Read every message of ``values``; ``plain`` says which ones the fast path may land."""
    table = text_table(codepage)
    count = len(values)
    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=count)
    starts = np.zeros(count, dtype=np.int64)
    if count:
        np.cumsum(lengths[:-1], out=starts[1:])
    # spare bytes at the end: every fixed-width read stays inside the buffer (what a read
    # past a message's end sees is masked by the length checks)
    joined = b"".join([*values, bytes(_SPARE)])
    buf = np.frombuffer(joined, dtype=np.uint8)
    reader = _Reader(buf)
    ebcdic, big, ok = _forms(buf, starts, lengths)
    if table is None:
        ok[:] = False
    head = np.where(ok, starts, 0)
    header = reader.block("URBH", head, big)
    hlen, lent = header.num("urbhlen"), header.num("urbhlent")
    ok &= (lent == lengths) & (hlen >= MIN_LENGTH["URBH"]) & (hlen <= lengths)
    htime = np.where(ok, header.num("urbhtime"), np.uint64(0))

    msg, off, kind, ln = _walk(reader, starts + np.where(ok, hlen, 0), starts + lengths,
                               ok, big, ebcdic)
    bad = ~ok
    _grammar(bad, msg, kind, ln)
    keep = ~bad[msg]
    msg, off, kind, ln = msg[keep], off[keep], kind[keep], ln[keep]
    elem_big, elem_ebcdic = big[msg], ebcdic[msg]
    is_t, is_r, is_d, is_e = (kind == URBT), (kind == URBR), (kind == URBD), (kind == URBE)
    t_pos, r_pos, d_pos = off[is_t], off[is_r], off[is_d]
    t_msg, r_msg, d_msg = msg[is_t], msg[is_r], msg[is_d]
    t_big, r_big, d_big = elem_big[is_t], elem_big[is_r], elem_big[is_d]
    t_ebc, r_ebc, d_ebc = elem_ebcdic[is_t], elem_ebcdic[is_r], elem_ebcdic[is_d]
    t_block = reader.block("URBT", t_pos, t_big)
    r_block = reader.block("URBR", r_pos, r_big)
    d_block = reader.block("URBD", d_pos, d_big)
    tx = {n: t_block.num(n) for n in _BINARY["URBT"]}
    rec = {n: r_block.num(n) for n in _BINARY["URBR"]}
    img = {n: d_block.num(n) for n in _BINARY["URBD"]}
    chars = _Chars(table or bytes(range(256)))
    flags = {n: chars.flag(t_block.raw(n), t_ebc) for n in ("urbtrsnd", "urbtptrn", "urbtinst")}
    rflag = chars.flag(r_block.raw("urbrrsnd"), r_ebc)

    # the grammar pairs each URBT with the next URBE, and every URBR/URBD with the URBT
    # (URBR) before it
    ntx, nrec = len(t_pos), len(r_pos)
    tx_of = np.cumsum(is_t) - 1
    rec_of = np.cumsum(is_r) - 1
    etsnr = reader.block("URBE", off[is_e], elem_big[is_e]).num("urbetsnr")
    _mark(bad, t_msg, (etsnr != tx["urbttsnr"]) | (tx["urbttsnr"] == 0)
          | flags["urbtrsnd"] | flags["urbtptrn"])
    rcount = np.bincount(tx_of[is_r], minlength=ntx)
    _mark(bad, t_msg, rcount != tx["urbtrcnt"])
    rank = np.arange(nrec) - _firsts(rcount)[tx_of[is_r]] + 1  # URBRRSNR counts 1..
    _mark(bad, r_msg, rec["urbrrsnr"] != rank)
    d_rec = rec_of[is_d]
    dcount = np.bincount(d_rec, minlength=nrec)
    _mark(bad, r_msg, dcount != rec["urbrdcnt"])
    drank = np.arange(len(d_pos)) - _firsts(dcount)[d_rec] + 1  # URBDDSNR counts 1..
    _mark(bad, d_msg, img["urbddsnr"] != drank)
    d_len = ln[is_d]
    lenh, lend = img["urbdlenh"], img["urbdlend"]
    lenh = np.where(lenh == 0, np.minimum(_URBD_FIXED, d_len), lenh)
    _mark(bad, d_msg, (lend < 0) | (lenh < ELEMENT_MIN) | (lenh > d_len) | (lenh + lend > d_len))
    # the byte cap (``max_buffered_bytes``) is checked after every URBD: the total decides
    size = np.bincount(tx_of[is_d], weights=np.maximum(lend, 0).astype(np.float64),
                       minlength=ntx)
    _mark(bad, t_msg, size > max_buffered_bytes)

    tx_count = np.bincount(t_msg, minlength=count)
    tx_end = np.cumsum(tx_count)
    d_start = np.where(bad[d_msg], 0, d_pos + lenh)
    d_end = np.where(bad[d_msg], 0, d_start + np.maximum(lend, 0))
    return Transactions(
        plain=~bad, htime=htime, tx_start=tx_end - tx_count, tx_end=tx_end,
        tx={**tx, **flags},
        rec={**rec, "tx": tx_of[is_r], "urbrrsnd": rflag},
        img={**img, "tx": tx_of[is_d], "rsnr": rec["urbrrsnr"][d_rec]},
        token=chars.column(t_block.raw("urbtrtok"), t_ebc),
        rec_type=chars.column(r_block.raw("urbrtyp"), r_ebc),
        rec_errc=chars.column(r_block.raw("urbrerrc"), r_ebc),
        img_type=chars.column(d_block.raw("urbdtyp"), d_ebc),
        payloads=_slices(joined, d_start, d_end),
    )


def _slices(joined: bytes, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``joined[start[i]:end[i]]`` for each i, as an object array of bytes."""
    out = np.empty(len(start), dtype=object)
    out[:] = [joined[a:b] for a, b in zip(start.tolist(), end.tolist(), strict=True)]
    return out


def _mark(bad: np.ndarray, msg: np.ndarray, where: np.ndarray) -> None:
    """Messages ``msg[i]`` with ``where[i]`` are not plain."""
    bad[msg[where]] = True


def _firsts(counts: np.ndarray) -> np.ndarray:
    """Index of each group's first member, for groups of ``counts`` members in a row."""
    out = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


def _grammar(bad: np.ndarray, msg: np.ndarray, kind: np.ndarray, ln: np.ndarray) -> None:
    """Not plain: an element of another kind or too short for the fields read, a message
    without elements, not starting with URBT or ending with URBE, or an element that may
    not follow the one before it."""
    _mark(bad, msg, kind == OTHER)
    for eye, k in _KIND_OF_EYE.items():
        _mark(bad, msg, (kind == k) & (ln < MIN_LENGTH[eye]))
    bad |= np.bincount(msg, minlength=len(bad)) == 0
    if not len(msg):
        return
    first = np.ones(len(msg), dtype=bool)
    first[1:] = msg[1:] != msg[:-1]
    last = np.ones(len(msg), dtype=bool)
    last[:-1] = first[1:]
    _mark(bad, msg, first & (kind != URBT))
    _mark(bad, msg, last & (kind != URBE))
    after = np.zeros(len(msg), dtype=bool)
    after[1:] = ~_FOLLOWS[kind[:-1], kind[1:]]
    _mark(bad, msg, after & ~first)


def _walk(reader: _Reader, pos: np.ndarray, end: np.ndarray, ok: np.ndarray,
          big: np.ndarray, ebcdic: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every message's element chain at once: (message, absolute offset, kind, length) of
    each element, in message order. A broken chain (``walk.elements``' rules) clears the
    message's ``ok``; an eye-catcher of the other form is a kind of its own (``OTHER``: the
    element decoder would not know it). Compiled where built, else :func:`_walk_numpy`."""
    if _NATIVE_WALK is not None:
        found = _NATIVE_WALK(reader.buf, pos, end, ok, big, ebcdic)
        if found is not None:
            return found
    return _walk_numpy(reader, pos, end, ok, big, ebcdic)


def _walk_numpy(reader: _Reader, pos: np.ndarray, end: np.ndarray, ok: np.ndarray,
                big: np.ndarray, ebcdic: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_walk` in numpy: one step per element position, over all messages at once."""
    pos = pos.copy()
    active = np.flatnonzero(ok & (pos < end))
    parts: list[tuple[np.ndarray, ...]] = []
    while active.size:
        p, e = pos[active], end[active]
        short = e - p < ELEMENT_MIN
        ok[active[short]] = False
        active, p, e = active[~short], p[~short], e[~short]
        raw = reader.buf[p[:, None] + np.arange(ELEMENT_MIN)]
        be, le = raw.view(_EYELEN[">"]).ravel(), raw.view(_EYELEN["<"]).ravel()
        eye = be["eye"].astype(np.uint64)
        ln = np.where(big[active], be["len"], le["len"]).astype(np.int64)
        broken = (ln < ELEMENT_MIN) | (p + ln > e)
        ok[active[broken]] = False
        active, p, eye, ln = active[~broken], p[~broken], eye[~broken], ln[~broken]
        at = np.minimum(np.searchsorted(_EYE_CODES, eye), len(_EYE_CODES) - 1)
        known = (_EYE_CODES[at] == eye) & (_EYE_EBCDIC[at] == ebcdic[active])
        parts.append((active, p, np.where(known, _EYE_KINDS[at], OTHER), ln))
        pos[active] = p + ln
        active = active[pos[active] < end[active]]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    msg, off, kind, ln = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.lexsort((off, msg))
    return msg[order], off[order], kind[order], ln[order]
