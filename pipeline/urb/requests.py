"""Client requests to the replicator's input queue: URBH + one URBI each, or for an
initial-state request one URBI per file of the definition (:func:`inst`).

Each function returns the whole message with URBHLENT set, in the form asked for (EBCDIC and
big endian by default, as the mainframe expects; the replicator also accepts ASCII and little
endian and translates).  Unused character fields are blanks and unused binary fields zeros, as
the input-message rules require.  The keyword options of :class:`Form` (``ebcdic``, ``big_endian``,
``codepage``, ``sender``, ``msnr``, ``time``) choose the form and fill URBHNAME, URBHMSNR and
URBHTIME, which the replicator ignores but operators see in dumps.

The prior-transaction request type is written 'TRAN' (the seed's example hex shows the typo
'TRAM'; the replicator reads 'TRAN').
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple, TypedDict, Unpack

from .codepages import ASCII_CODEC, check_codepage
from .element import Element
from .encode import encode_message, make_element
from .layouts import ALIGN, BIG

RANGE_INDICATOR = 0xFFFFFFFF
MAX_ISN = 0xFFFFFFFE  # X'FFFFFFFF' would read as a range indicator

IsnItem = int | tuple[int, int]

_NAME_LEN = 8


def _name(field: str, value: str) -> str:
    value = value or ""
    if len(value) > _NAME_LEN:
        raise ValueError(f"{field} {value!r} is longer than {_NAME_LEN} characters")
    return value


class Form(TypedDict, total=False):
    """How a request is written: EBCDIC/ASCII, byte order, code page and URBH extras."""

    ebcdic: bool  # default True
    big_endian: bool  # default True
    codepage: str  # default "cp037" (EBCDIC only)
    sender: str  # URBHNAME, default blank
    msnr: int  # URBHMSNR, default 0
    time: int  # URBHTIME (raw STCK), default 0


def _message(urbi: Element, form: Form) -> bytes:
    return _message_of([urbi], form)


def _message_of(urbis: list[Element], form: Form) -> bytes:
    header = make_element(
        "URBH",
        urbhname=_name("sender", form.get("sender", "")),
        urbhmsnr=form.get("msnr", 0),
        urbhtime=form.get("time", 0),
    )
    return encode_message(
        header,
        urbis,
        ebcdic=form.get("ebcdic", True),
        big_endian=form.get("big_endian", True),
        codepage=form.get("codepage", "cp037"),
    )


def tran(
    snam: str, dnam: str, tsnr: int, *, rnam: str = "", rtok: str = "", **form: Unpack[Form]
) -> bytes:
    """Prior-transaction request: resend transaction ``tsnr`` of subscription ``snam``.

    The replicator requires the subscription, destination and transaction number; the seed's
    own example omits the destination, so an empty ``dnam`` is allowed (blank) to reproduce it.
    """
    if not snam:
        raise ValueError("TRAN needs the subscription name (URBISNAM)")
    if not 0 < tsnr <= 0xFFFFFFFF:
        raise ValueError(f"TRAN transaction number must be 1..4294967295, got {tsnr}")
    urbi = make_element(
        "URBI",
        urbirt="TRAN",
        urbisnam=_name("snam", snam),
        urbidnam=_name("dnam", dnam),
        urbitsnr=tsnr,
        urbirnam=_name("rnam", rnam),
        urbirtok=_name("rtok", rtok),
    )
    return _message(urbi, form)


def stat(
    snam: str = "", dnam: str = "", *, rnam: str = "", rtok: str = "", **form: Unpack[Form]
) -> bytes:
    """Status request for a subscription, a destination, or the pair (one is required)."""
    if not snam and not dnam:
        raise ValueError("STAT needs the subscription (URBISNAM) or destination (URBIDNAM)")
    urbi = make_element(
        "URBI",
        urbirt="STAT",
        urbisnam=_name("snam", snam),
        urbidnam=_name("dnam", dnam),
        urbirnam=_name("rnam", rnam),
        urbirtok=_name("rtok", rtok),
    )
    return _message(urbi, form)


def _destination(rt: str, dnam: str, rnam: str, rtok: str, form: Form) -> bytes:
    if not dnam:
        raise ValueError(f"{rt} needs the destination name (URBIDNAM)")
    urbi = make_element(
        "URBI",
        urbirt=rt,
        urbidnam=_name("dnam", dnam),
        urbirnam=_name("rnam", rnam),
        urbirtok=_name("rtok", rtok),
    )
    return _message(urbi, form)


def open_destination(dnam: str, *, rnam: str = "", rtok: str = "", **form: Unpack[Form]) -> bytes:
    """Open-destination request (OPND)."""
    return _destination("OPND", dnam, rnam, rtok, form)


def close_destination(dnam: str, *, rnam: str = "", rtok: str = "", **form: Unpack[Form]) -> bytes:
    """Close-destination request (CLSD)."""
    return _destination("CLSD", dnam, rnam, rtok, form)


def validate_isns(isns: Iterable[IsnItem]) -> list[IsnItem]:
    """Check an ISN list against the replicator's rules; raise ``ValueError`` naming the rule.

    Rules (a violation is answered with response 131 subcode 16):
    1. the same ISN must not be given more than once (a range may start and end on one ISN);
    2. an individual ISN may not lie within an ISN range;
    3. ISN ranges must not overlap;
    4. starting ISN <= ending ISN.
    In addition every ISN must be 1..X'FFFFFFFE' (X'FFFFFFFF' marks a range on the wire).
    """
    items: list[IsnItem] = []
    singles: list[int] = []
    ranges: list[tuple[int, int]] = []
    for item in isns:
        if isinstance(item, tuple):
            if len(item) != 2:
                raise ValueError(f"ISN range must be (start, end), got {item!r}")
            start, end = int(item[0]), int(item[1])
            for isn in (start, end):
                if not 1 <= isn <= MAX_ISN:
                    raise ValueError(f"ISN {isn} outside 1..{MAX_ISN} (rule: valid ISN)")
            if start > end:
                raise ValueError(
                    f"range ({start}, {end}): rule 'starting ISN <= ending ISN' violated"
                )
            ranges.append((start, end))
            items.append((start, end))
        else:
            isn = int(item)
            if not 1 <= isn <= MAX_ISN:
                raise ValueError(f"ISN {isn} outside 1..{MAX_ISN} (rule: valid ISN)")
            singles.append(isn)
            items.append(isn)
    seen: set[int] = set()
    for isn in singles:
        if isn in seen:
            raise ValueError(
                f"ISN {isn}: rule 'the same ISN must not be specified more than once' violated"
            )
        seen.add(isn)
    ordered = sorted(ranges)
    for (s1, e1), (s2, e2) in itertools.pairwise(ordered):
        if s2 <= e1:
            raise ValueError(
                f"ranges ({s1}, {e1}) and ({s2}, {e2}): rule 'ISN ranges must not overlap' violated"
            )
    if ordered:
        starts = [s for s, _e in ordered]
        for isn in singles:
            i = bisect.bisect_right(starts, isn) - 1
            if i >= 0 and ordered[i][0] <= isn <= ordered[i][1]:
                s, e = ordered[i]
                raise ValueError(
                    f"ISN {isn} lies within range ({s}, {e}): rule 'an individual "
                    "ISN may not lie within an ISN range' violated"
                )
    return items


def encode_isn_list(isns: Iterable[IsnItem], *, big_endian: bool = True) -> bytes:
    """The URBI data for an ISN list: fullword ISNs, ranges as X'FFFFFFFF' start end."""
    words: list[int] = []
    for item in validate_isns(isns):
        if isinstance(item, tuple):
            words += [RANGE_INDICATOR, item[0], item[1]]
        else:
            words.append(item)
    return struct.pack(f"{'>' if big_endian else '<'}{len(words)}I", *words)


class FileSelection(NamedTuple):
    """One file of an initial-state request: the whole file (no ``isns``, no ``selection``),
    an ISN list (ints and (start, end) ranges), or selection data (bytes as they go on the
    wire, or str encoded in the message's code page, described by ``acod``/``wcod``/``arc``)."""

    dbid: int
    fnr: int
    isns: Sequence[IsnItem] | None = None
    selection: bytes | str | None = None
    acod: int = 0
    wcod: int = 0
    arc: int = 0


#: The ISN list of a file of an ISN-list definition that has nothing to refresh in this
#: request. Seed 000: a definition of several files needs a URBI for each file, and an
#: ISN-list definition refuses a URBI without data (131/19), so such a file still needs an
#: ISN list. This one is one range X'FFFFFFFE'..X'FFFFFFFE' (a range may start and end on
#: one ISN), and for a range "Only existent ISNs will be returned": X'FFFFFFFE' is the
#: highest ISN there is, which no file of fewer than 4,294,967,294 records holds, so the
#: file contributes nothing (an individual ISN instead would come back as a URBR with
#: response 113). A tuple, so the shared constant cannot be changed.
EMPTY_ISN_SELECTION: tuple[IsnItem, ...] = ((MAX_ISN, MAX_ISN),)


def inst(
    inam: str,
    files: Sequence[FileSelection],
    *,
    rnam: str = "",
    rtok: str = "",
    **form: Unpack[Form],
) -> bytes:
    """Initial-state request: one message with a URBI per file of the definition.

    Seed 000: "If the initial-state definition includes more than one file-database ID
    definition for the request, the initial-state request must contain a URBI for each
    file", every URBI naming the same definition (else 131/11) and token (else 131/18) —
    both given once here, so they cannot differ.

    Refused here, since the replicator would refuse them too: no file, a file twice, and
    files selected in different manners. Seed 000 makes the manner the definition's: "If the
    initial-state definition indicates that an ISN list should be used ..., the
    initial-state request must include an ISNLIST", and URBILEND is zero where "all records
    in the file are selected by the initial-state definition"; the answers 131/15 (URBILEND
    not zero for a whole-file definition) and 131/19 (zero for one with selection) are about
    the definition's kind too. One message names one definition, so a whole-file URBI next
    to one with data earns 15 or 19 whatever the definition is, and an ISN list next to
    selection data is wrong for one of them. A file of an ISN-list definition with nothing
    to refresh therefore takes :data:`EMPTY_ISN_SELECTION`, not a whole-file URBI.
    """
    if not inam:
        raise ValueError("INST needs the initial-state name (URBIINAM)")
    if not files:
        raise ValueError("INST needs at least one file")
    seen = [(f.dbid, f.fnr) for f in files]
    if len(set(seen)) != len(seen):
        raise ValueError(f"INST names a file twice: {seen}")
    manners = {f"{f.dbid}/{f.fnr}": _manner(f) for f in files}
    if len(set(manners.values())) > 1:
        raise ValueError("INST mixes selection manners in one message (the definition has "
                         f"one): {manners}")
    urbis = [_inst_urbi(inam, f, rnam, rtok, form) for f in files]
    return _message_of(urbis, form)


def _manner(f: FileSelection) -> str:
    """How a URBI selects its file's records: seed 000's three manners."""
    if f.isns is not None:
        return "ISN list"
    return "whole file" if f.selection is None else "selection data"


def _inst_urbi(inam: str, f: FileSelection, rnam: str, rtok: str, form: Form) -> Element:
    """One file's URBI: URBILEND is the ISN list's or selection's length, 0 for all."""
    if not 0 < f.dbid <= 0xFFFF or not 0 < f.fnr <= 0xFFFF:
        raise ValueError(f"INST needs DBID and FNR 1..65535, got {f.dbid}/{f.fnr}")
    if f.isns is not None and f.selection is not None:
        raise ValueError("INST takes an ISN list or selection data, not both")
    if f.selection is None and (f.acod or f.wcod or f.arc):
        raise ValueError(
            "URBIACOD/URBIWCOD/URBIARC describe selection data and must be zero without it"
        )
    data = b""
    if f.isns is not None:
        data = encode_isn_list(f.isns, big_endian=form.get("big_endian", True))
        if not data:
            raise ValueError("INST ISN list is empty")
    elif f.selection is not None:
        ebcdic = form.get("ebcdic", True)
        codec = check_codepage(form.get("codepage", "cp037")) if ebcdic else ASCII_CODEC
        data = f.selection.encode(codec) if isinstance(f.selection, str) else bytes(f.selection)
        if not data:
            raise ValueError("INST selection data is empty")
    size = BIG["URBI"].size
    return make_element(
        "URBI",
        urbirt="INST",
        urbiinam=_name("inam", inam),
        urbidbid=f.dbid,
        urbifnr=f.fnr,
        urbirnam=_name("rnam", rnam),
        urbirtok=_name("rtok", rtok),
        urbiacod=f.acod,
        urbiwcod=f.wcod,
        urbiarc=f.arc,
        data=data,
        urbilen=(size + len(data) + ALIGN - 1) // ALIGN * ALIGN,
    )


def inst_file(
    inam: str,
    dbid: int,
    fnr: int,
    *,
    rnam: str = "",
    rtok: str = "",
    isns: Iterable[IsnItem] | None = None,
    selection: bytes | str | None = None,
    acod: int = 0,
    wcod: int = 0,
    arc: int = 0,
    **form: Unpack[Form],
) -> bytes:
    """The request of a single-file definition (:func:`inst` with one file): the whole
    file without ``isns`` or ``selection``."""
    one = FileSelection(dbid, fnr, None if isns is None else list(isns), selection, acod, wcod,
                        arc)
    return inst(inam, [one], rnam=rnam, rtok=rtok, **form)
