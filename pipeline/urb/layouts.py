"""DSECT layouts declared as data and compiled once per byte order.

Each table row is ``(offset, DSECT field name, type, length)``.  Types:

``C``  character, decoded in the message's code page; trailing blanks and zeros removed
``U``  unsigned binary integer (1, 2, 4 or 8 bytes)
``I``  signed binary integer (length fields, so a negative length can be detected)
``T``  STCK time of day, kept as the raw unsigned 64-bit value
``X``  raw bytes (URBTGUID)
``F``  reserved filler: skipped on decode, zeros on encode

Offsets are checked against the running sum at import, so a typo in a table fails loudly
instead of shifting every later field.  Sizes derive from the tables, never from constants.

Why compile prefixes: an element may be shorter than its DSECT (the seeds' URBT is 112 bytes,
the current DSECT 128) and only the fields that fit inside the element's own length may be
read.  For every possible element length we precompute the ``struct.Struct`` that covers
exactly the fitting fields, so decoding stays a single ``unpack_from`` per element.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

Row = tuple[int, str, str, int]

URBH: tuple[Row, ...] = (
    (0, "urbheye", "C", 4),  # 'URBH' in EBCDIC or ASCII: tells the code page
    (4, "urbhlen", "I", 4),  # length of URBH
    (8, "urbhvers", "C", 2),  # DSECT version '01'
    (10, "urbhbord", "U", 2),  # 1 in the sender's byte order: tells big/little endian
    (12, "urbhlent", "U", 4),  # total message length
    (16, "urbhmsnr", "U", 4),  # message sequence number per destination
    (20, "urbhtime", "T", 8),  # STCK when the message was sent
    (28, "urbhrpid", "U", 2),  # replicator target id
    (30, "urbhrpni", "U", 2),  # replicator nucleus id
    (32, "urbhname", "C", 8),  # sender name ('REPTOR')
    (40, "urbhres1", "F", 24),
)

URBT: tuple[Row, ...] = (
    (0, "urbteye", "C", 4),
    (4, "urbtlen", "I", 4),
    (8, "urbtsnam", "C", 8),  # subscription name
    (16, "urbttsnr", "U", 4),  # transaction sequence number in subscription/destination
    (20, "urbtrcnt", "U", 4),  # number of URBRs in the transaction
    (24, "urbtttim", "T", 8),  # STCK of the commit (ET) in Adabas
    (32, "urbtptim", "T", 8),  # STCK end of subscription processing
    (40, "urbtdbid", "U", 2),
    (42, "urbtnuci", "U", 2),
    (44, "urbtguid", "X", 28),  # originating 28-byte user id
    (72, "urbtrpid", "U", 2),
    (74, "urbtrpni", "U", 2),
    (76, "urbtusrv", "C", 2),  # user subscription version
    (78, "urbtrsnd", "C", 1),  # 'Y': may have been sent before
    (79, "urbtinst", "C", 1),  # 'Y': initial-state pseudo transaction
    (80, "urbtrtok", "C", 8),  # request token (initial state)
    (88, "urbtcont", "C", 1),  # 'Y': continues in the next message
    (89, "urbtarc", "U", 1),  # architecture flags of the data
    (90, "urbtptrn", "C", 1),  # 'Y': resent by a prior-transaction request
    (91, "urbtsort", "C", 1),  # 'Y'/'N': records sorted by file, ISN
    (92, "urbtacod", "U", 4),  # alpha encoding of the data
    (96, "urbtwcod", "U", 4),  # wide encoding of the data
    (100, "urbtutok", "U", 2),  # utility token (replay, ADALOD)
    (102, "urbtorig", "C", 1),  # origin of the transaction
    (103, "urbtres1", "F", 1),
    (104, "urbtsuid", "C", 8),  # security system user id
    (112, "urbtres2", "F", 16),
)

URBR: tuple[Row, ...] = (
    (0, "urbreye", "C", 4),
    (4, "urbrlen", "I", 4),
    (8, "urbrrsnr", "U", 4),  # record sequence number in the transaction
    (12, "urbrdcnt", "I", 2),  # number of URBDs for this record
    (14, "urbrfnr", "U", 2),
    (16, "urbrisn", "U", 4),
    (20, "urbrtime", "T", 8),  # STCK of the last modification
    (28, "urbrtyp", "C", 1),  # D/I/R/U
    (29, "urbrrsnd", "C", 1),
    (30, "urbrrsp", "U", 2),  # response code
    (32, "urbrsubc", "U", 4),
    (36, "urbrerrc", "C", 8),
    (44, "urbrdcu", "C", 1),  # 'Y': delete converted to update
    (45, "urbruc", "C", 1),  # update converted to 'D'elete or 'I'nsert
    (46, "urbrres1", "F", 18),
)

URBD: tuple[Row, ...] = (
    (0, "urbdeye", "C", 4),
    (4, "urbdlen", "I", 4),  # URBD + data + filler
    (8, "urbdlenh", "I", 4),  # URBD proper: where the data starts
    (12, "urbdlend", "I", 4),  # length of the data
    (16, "urbddsnr", "U", 4),  # data sequence number for the record
    (20, "urbdtyp", "C", 1),  # A after, B before, K key before image
    (21, "urbdres1", "F", 11),
)

URBE: tuple[Row, ...] = (
    (0, "urbeeye", "C", 4),
    (4, "urbelen", "I", 4),
    (8, "urbesnam", "C", 8),
    (16, "urbetsnr", "U", 4),
    (20, "urberes1", "F", 12),
)

URBC: tuple[Row, ...] = (
    (0, "urbceye", "C", 4),
    (4, "urbclen", "I", 4),
    (8, "urbcsnam", "C", 8),
    (16, "urbctsnr", "U", 4),  # transaction that continues here
    (20, "urbcrsnr", "U", 4),  # record sequence number where it stopped
    (24, "urbcdsnr", "U", 4),  # data sequence number where it stopped
    (28, "urbccont", "C", 1),  # 'Y': continues again in the next message
    (29, "urbcres1", "F", 19),
)

URBS: tuple[Row, ...] = (
    (0, "urbseye", "C", 4),
    (4, "urbslen", "I", 4),  # URBS + data + filler
    (8, "urbsrtok", "C", 8),  # token from the request
    (16, "urbsrt", "C", 4),  # request type, blank when not a reply
    (20, "urbsst", "C", 4),  # status
    (24, "urbstime", "T", 8),
    (32, "urbsrsp", "U", 4),
    (36, "urbssubc", "U", 4),
    (40, "urbserri", "C", 8),
    (48, "urbsinam", "C", 8),
    (56, "urbssnam", "C", 8),
    (64, "urbsdnam", "C", 8),
    (72, "urbsptim", "T", 8),  # STCK last transaction processed (SUBS)
    (80, "urbsttim", "T", 8),  # STCK last transaction commit
    (88, "urbstsnr", "U", 4),
    (92, "urbsdbid", "U", 2),
    (94, "urbsfnr", "U", 2),
    (96, "urbslenh", "I", 4),  # URBS proper: where URBSDATA starts (0 in old replicators)
    (100, "urbslend", "I", 4),  # length of URBSDATA
    (104, "urbsutok", "U", 2),
    (106, "urbsorig", "C", 1),
    (107, "urbsres1", "F", 5),
    (112, "urbsiqnm", "C", 8),  # input queue name
    (120, "urbsres2", "F", 8),
)

URBU: tuple[Row, ...] = (
    (0, "urbueye", "C", 4),
    (4, "urbulen", "I", 4),
    (8, "urbuvers", "C", 2),
    (10, "urbuname", "C", 8),  # ADARPE extract name
    (18, "urbutime", "T", 8),
    (26, "urbudist", "C", 22),  # the same time, displayable local time
    (48, "urbures1", "F", 32),
)

URBF: tuple[Row, ...] = (
    (0, "urbfeye", "C", 4),
    (4, "urbflen", "I", 4),  # URBF + URBGs
    (8, "urbflenh", "I", 4),  # URBF proper: where the URBGs start
    (12, "urbflend", "I", 4),  # length of all URBGs
    (16, "urbfvers", "C", 2),
    (18, "urbffnre", "C", 5),
    (23, "urbfflag", "U", 1),
    (24, "urbfgfid", "C", 8),  # global format id
    (32, "urbfdbid", "U", 4),
    (36, "urbffnr", "U", 2),
    (38, "urbffnml", "U", 2),
    (40, "urbffnam", "C", 32),
    (72, "urbftim1", "T", 8),
    (80, "urbfcntg", "U", 2),  # number of URBGs
    (82, "urbfleng", "U", 2),  # length of each URBG
    (84, "urbftim2", "T", 8),
    (92, "urbfres1", "F", 20),
)

URBG: tuple[Row, ...] = (
    (0, "urbgidx", "U", 2),
    (2, "urbgfid", "C", 2),  # Adabas short name
    (4, "urbgffmt", "U", 1),
    (5, "urbgtype", "U", 1),
    (6, "urbgflen", "U", 2),
    (8, "urbgfprc", "U", 2),
    (10, "urbgflag", "U", 1),
    (11, "urbgres1", "F", 1),
    (12, "urbgfrno", "U", 2),
    (14, "urbgfrfm", "U", 2),
    (16, "urbgfono", "U", 2),
    (18, "urbgfofm", "U", 2),
    (20, "urbgfnml", "U", 2),
    (22, "urbgfnam", "C", 32),  # long field name
    (54, "urbgfgrp", "C", 2),
    (56, "urbgfmtx", "C", 2),
    (58, "urbgfrpn", "C", 2),
    (60, "urbgffon", "C", 2),
    (62, "urbgres2", "F", 2),
)

URBI: tuple[Row, ...] = (
    (0, "urbieye", "C", 4),
    (4, "urbilen", "I", 4),  # URBI + selection data/ISN list + alignment filler
    (8, "urbilenh", "I", 4),  # URBI proper
    (12, "urbilend", "I", 4),  # length of selection data or ISN list
    (16, "urbirtok", "C", 8),
    (24, "urbirnam", "C", 8),
    (32, "urbirt", "C", 4),  # STAT INST TRAN OPND CLSD
    (36, "urbidbid", "U", 2),
    (38, "urbifnr", "U", 2),
    (40, "urbiinam", "C", 8),
    (48, "urbisnam", "C", 8),
    (56, "urbidnam", "C", 8),
    (64, "urbiacod", "U", 4),
    (68, "urbiwcod", "U", 4),
    (72, "urbiarc", "U", 1),
    (73, "urbires1", "F", 3),
    (76, "urbitsnr", "U", 4),
    (80, "urbires2", "F", 16),
)

# URBSU: detail of an AUTI (utility) status, at the start of URBSDATA.
URBSU: tuple[Row, ...] = (
    (0, "urbsueye", "C", 6),
    (6, "urbsutyp", "U", 1),
    (7, "urbsures", "F", 25),
)

# Utility-specific detail after the 32-byte URBSU, keyed by URBSUTYP.
URBSU_DETAIL: dict[int, tuple[Row, ...]] = {
    0x41: ((0, "fieldname", "C", 2), (2, "newlength", "I", 4)),
    0x44: ((0, "status", "C", 2), (2, "anchor", "U", 2)),
    0x4A: ((0, "fieldname", "C", 2),),
    0x4B: ((0, "filename", "C", 16),),
    0x4E: ((0, "isnreuse", "C", 4),),
    0x4F: ((0, "dsreuse", "C", 4),),
    0x55: (
        (0, "assopfac", "U", 2),
        (2, "datapfac", "U", 2),
        (4, "maxrecl", "U", 4),
        (8, "maxui", "U", 2),
        (10, "maxni", "U", 2),
        (12, "maxds", "U", 2),
        (14, "pgmrefresh", "C", 1),
        (15, "rplupdateonly", "C", 1),
    ),
    0x5C: ((0, "fieldname", "C", 2), (2, "newformat", "C", 1), (3, "res", "F", 1)),
    0x68: ((0, "userisn", "I", 4),),
    0x69: ((0, "mixdsdev", "I", 4),),
    0x70: ((0, "fieldname", "C", 2), (2, "reason", "U", 1), (3, "res", "F", 5)),
    0x78: ((0, "mupex", "I", 4),),
}

UTILITY_NAMES: dict[int, str] = {
    0x41: "change field length",
    0x44: "delete file",
    0x48: "refresh file",
    0x4A: "release descriptor",
    0x4B: "rename file",
    0x4E: "switch reuse ISN",
    0x4F: "switch reuse data storage",
    0x55: "modify FCB",
    0x57: "define file",
    0x58: "write FDT",
    0x59: "add new fields",
    0x5C: "change field format",
    0x68: "switch USERISN",
    0x69: "switch MIXDSDEV",
    0x70: "online invert",
    0x78: "switch MUPEX",
}

#: Elements that may follow the URBH, by eye-catcher.  URBG and URBSU are nested parts.
ELEMENT_TABLES: dict[str, tuple[Row, ...]] = {
    "URBT": URBT,
    "URBR": URBR,
    "URBD": URBD,
    "URBE": URBE,
    "URBC": URBC,
    "URBS": URBS,
    "URBU": URBU,
    "URBF": URBF,
    "URBI": URBI,
}
ALL_TABLES: dict[str, tuple[Row, ...]] = {"URBH": URBH, **ELEMENT_TABLES, "URBG": URBG}

#: Which field of an element holds its total length (eye-catcher is always at 0).
LENGTH_FIELD: dict[str, str] = {eye: f"{eye.lower()}len" for eye in ALL_TABLES if eye != "URBG"}

#: Elements whose length field says "header + variable data", with the header-length and
#: data-length fields.
VARIABLE: dict[str, tuple[str, str]] = {
    "URBD": ("urbdlenh", "urbdlend"),
    "URBS": ("urbslenh", "urbslend"),
    "URBI": ("urbilenh", "urbilend"),
    "URBF": ("urbflenh", "urbflend"),
}

#: Variable data is padded to this boundary when the encoder computes lengths.  The seed
#: dumps only show data lengths that are already multiples of 4; the URBI description asks for
#: "filler for alignment", and fullword alignment is what the DSECTs' fields need.
ALIGN = 4

_INT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
STRIP = " \x00"


@dataclass(frozen=True, slots=True)
class Variant:
    """The decode/encode plan for the fields that fit into ``size`` bytes of one DSECT."""

    size: int  # bytes covered by the fitting fields
    build: Callable[[bytes, str, int], dict[str, Any]]  # (data, text, offset) -> fields
    pack_into: Callable[..., None]  # Struct.pack_into for every fitting field
    fields: tuple[Row, ...]  # fitting non-filler rows in DSECT order (encode order)


@dataclass(frozen=True, slots=True)
class Layout:
    """One DSECT compiled for one byte order."""

    eye: str
    size: int
    rows: tuple[Row, ...]
    names: frozenset[str]
    full: Variant
    by_len: tuple[Variant, ...]  # index = element length < size

    def variant(self, length: int) -> Variant:
        """The plan for an element that is ``length`` bytes long."""
        return self.full if length >= self.size else self.by_len[length]


def _check(eye: str, rows: Sequence[Row]) -> int:
    pos = 0
    for off, name, typ, length in rows:
        if off != pos:
            raise AssertionError(f"{eye}.{name}: offset {off} but previous field ends at {pos}")
        if typ in "UIT" and length not in _INT_CODES:
            raise AssertionError(f"{eye}.{name}: bad binary length {length}")
        if typ == "T" and length != 8:
            raise AssertionError(f"{eye}.{name}: STCK must be 8 bytes")
        pos = off + length
    return pos


def _builder(eye: str, rows: Sequence[Row], order: str) -> Callable[..., dict[str, Any]]:
    """Generate the decoder for one variant: one ``unpack_from`` plus one dict display.

    Why generated code: a function whose body is a literal dict with constant keys, fed by one
    tuple unpack and one slice per character field, is about twice as fast as building the
    dict with ``dict(zip(names, values))`` from separately stripped strings, and the decode
    stage pays this cost for every element of every Kafka message.  The eye-catcher field is
    the constant the element was dispatched on.
    """
    fmt = [order]
    binary: list[str] = []
    items: list[str] = []
    size = 0
    for off, name, typ, length in rows:
        size = off + length
        if typ in "FC":
            fmt.append(f"{length}x")
        elif typ == "X":
            fmt.append(f"{length}s")
        else:
            code = _INT_CODES[length]
            fmt.append(code.lower() if typ == "I" else code)
        if typ == "F":
            continue
        if typ == "C":
            if off == 0 and name.endswith("eye") and length == 4:
                items.append(f"{name!r}: {eye!r}")
            elif length == 1:
                items.append(f"{name!r}: s[{off}].rstrip(_S)")
            else:
                items.append(f"{name!r}: s[{off}:{off + length}].rstrip(_S)")
        else:
            var = f"v{len(binary)}"
            binary.append(var)
            items.append(f"{name!r}: {var}")
    lines = ["def build(data, text, off):"]
    if binary:
        lines.append(f"    {', '.join(binary)}, = _unpack(data, off)")
    lines.append(f"    s = text[off:off + {size}]")
    lines.append("    return {" + ", ".join(items) + "}")
    namespace: dict[str, Any] = {"_unpack": struct.Struct("".join(fmt)).unpack_from, "_S": STRIP}
    exec("\n".join(lines), namespace)  # source built from the tables above only
    return namespace["build"]


def _variant(eye: str, rows: Sequence[Row], order: str) -> Variant:
    enc = [order]
    for _off, _name, typ, length in rows:
        if typ == "F":
            enc.append(f"{length}x")
        elif typ in "CX":
            enc.append(f"{length}s")
        else:
            code = _INT_CODES[length]
            enc.append(code.lower() if typ == "I" else code)
    size = rows[-1][0] + rows[-1][3] if rows else 0
    return Variant(
        size=size,
        build=_builder(eye, rows, order),
        pack_into=struct.Struct("".join(enc)).pack_into,
        fields=tuple(r for r in rows if r[2] != "F"),
    )


def compile_layout(eye: str, rows: Sequence[Row], order: str) -> Layout:
    """Compile one table for one byte order (``'>'`` big endian, ``'<'`` little endian)."""
    size = _check(eye, rows)
    rows = tuple(rows)
    prefixes: dict[int, Variant] = {}
    by_len: list[Variant] = []
    for length in range(size):
        k = sum(1 for off, _n, _t, ln in rows if off + ln <= length)
        if k not in prefixes:
            prefixes[k] = _variant(eye, rows[:k], order)
        by_len.append(prefixes[k])
    return Layout(
        eye=eye,
        size=size,
        rows=rows,
        names=frozenset(r[1] for r in rows if r[2] != "F"),
        full=_variant(eye, rows, order),
        by_len=tuple(by_len),
    )


def _compile_all(order: str) -> dict[str, Layout]:
    return {eye: compile_layout(eye, rows, order) for eye, rows in ALL_TABLES.items()}


# Read-only views: the compiled tables are shared by every call and must never change.
BIG: Mapping[str, Layout] = MappingProxyType(_compile_all(">"))
LITTLE: Mapping[str, Layout] = MappingProxyType(_compile_all("<"))
URBSU_BIG = compile_layout("URBSU", URBSU, ">")
URBSU_LITTLE = compile_layout("URBSU", URBSU, "<")
DETAIL_BIG: Mapping[int, Layout] = MappingProxyType(
    {t: compile_layout(f"URBSU{t:02X}", r, ">") for t, r in URBSU_DETAIL.items()}
)
DETAIL_LITTLE: Mapping[int, Layout] = MappingProxyType(
    {t: compile_layout(f"URBSU{t:02X}", r, "<") for t, r in URBSU_DETAIL.items()}
)

FIELD_NAMES: Mapping[str, frozenset[str]] = MappingProxyType(
    {eye: lay.names for eye, lay in BIG.items()}
)
