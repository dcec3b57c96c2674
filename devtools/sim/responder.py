"""Answering requests from the replicator's input queue, as seed 000 describes them.

- TRAN: resend from the resend buffer (URBT, URBRs, before images; URBTRSND, URBTPTRN and
  URBRRSND 'Y') to the named destination, or to all of the subscription's destinations when
  the request names none; a TRAN/TRSP URBS with response 0 to the reply destination (the
  resend reaches the output topics ``resend_delay_ms`` later: ``answer_faults.py``). Errors
  are rsp 131 with subcode 32 (unknown subscription), 31/33 (destination unknown / not the
  subscription's), 34 (no resend buffer), 35 (tsnr no longer in the buffer); 34 and 35 also
  go to the destination named in the request.
- STAT: a STAT/SUBS URBS per subscription/destination pair asked about, to that destination,
  with a copy to the reply destination; 131/7 (neither named) or 131/8 (not found).
- INST: one request message is answered as a whole (seed 000: a definition of several files
  needs a URBI for each, all with the same definition name and token): INST/INIT per URBI to
  the reply and output destinations, each file's pseudo-transactions (tsnr 0, of the URBI's
  database and stamped on its clock, URBTINST='Y', URBRTYP='R', after images; an ISN list
  selects records, a missing single ISN gives a URBR with rsp 113 and no URBD, a range only
  existing ISNs), then INST/CMPL per URBI. A definition over several databases may be asked
  one database per message. Or one INST/ERRO with rsp 131 to the reply destination: 44 too
  many requests in progress (IMAXREQ, ``answer_faults.py``), 9 unknown name, 11 URBIs
  naming different definitions, 10 different reply destinations, 18 different tokens, 12 a
  URBI's DBID/FNR not in the definition, 14 a URBI without DBID or FNR and — an assumption —
  a file of the definition that has no URBI, 15/19 ISN list against the definition's
  selection, 16 invalid ISN list, 70 no subscription for the file. Seed 000 says a request
  lacking a file's URBI is wrong, not which subcode answers it; the subcode texts of
  adapya-era 1.3.0 (``adapya.era.urb.texts_reptor_subcodes``, our ``pipeline.urb.codes``)
  make 12 the other direction ("INITIALSTATE DBID/FNR definition not found as requested in
  URBI") and 14 this one ("DBID/FNR must be specified in Initial-state request and
  definition": the definition's file is not specified in the request).
- OPND/CLSD: open or close the destination; OPND/OPEN or CLSD/CLOS to the reply destination
  (or the destination itself); 131/26 for an unknown destination.

The responder works on what :class:`ReplicatorView` declares (the replicator passes itself),
so it imports nothing of the replicator: the imports go one way, replicator -> responder.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from devtools.sim.answer_faults import TOO_MANY_REQUESTS, AnswerFaults
from devtools.sim.clock import Clock, stck
from devtools.sim.elements import Part, TxFlags, status_part
from devtools.sim.model import InitialStateDef, SimConfig, Subscription
from devtools.sim.outbox import Delivery, Outbox
from devtools.sim.payloads import encode_record
from devtools.sim.resend import ResendBuffer
from devtools.sim.transactions import (
    REFRESH,
    RSP_ISN_NOT_FOUND,
    RecordChange,
    Transaction,
    TransactionGenerator,
)
from pipeline.urb import Element, UrbFormatError, decode_message
from pipeline.urb.requests import validate_isns

RSP = 131
TRAN_DEST_ERRORS = frozenset({34, 35, 37, 39, 40, 41, 42, 43})
INITIAL_STATE_GUID = b"\x11" * 4 + b"\x22" * 4


class SentState(Protocol):
    """What STAT reports of a subscription: the last tsnr sent and that transaction's commit
    and processing times (0 before the first)."""

    @property
    def tsnr(self) -> int: ...

    @property
    def commit(self) -> int: ...

    @property
    def processed(self) -> int: ...


class ReplicatorView(Protocol):
    """What answering a request needs of the replicator: its definitions, clock, destinations
    (outbox), current records (for initial state), what it sent per subscription, its resend
    buffers and its two ways of sending."""

    @property
    def config(self) -> SimConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def generator(self) -> TransactionGenerator: ...

    @property
    def states(self) -> Mapping[str, SentState]: ...

    @property
    def answer_faults(self) -> AnswerFaults: ...

    def resend_buffer(self, sub: Subscription) -> ResendBuffer | None:
        """The subscription's resend buffer, None when it has none."""
        ...

    def send_transaction(
        self,
        sub: Subscription,
        tx: Transaction,
        tsnr: int,
        flags: TxFlags,
        destinations: Sequence[str],
    ) -> list[Delivery]:
        """Send one transaction in messages of its own (resends, initial-state data)."""
        ...

    def send_status(
        self, destinations: Sequence[str], key: str, part_factory: Callable[[str], Part]
    ) -> list[Delivery]:
        """One URBS message to each destination (once each), in the destination's form."""
        ...


def answer(rep: ReplicatorView, request: bytes) -> list[Delivery]:
    """Every URBI of one request message, answered in order; undecodable input is ignored."""
    try:
        message = decode_message(request)
    except UrbFormatError:
        return []
    out: list[Delivery] = []
    urbis = [e for e in message.elements if e.eye == "URBI"]
    inst = [u for u in urbis if u.urbirt == "INST"]
    for urbi in urbis:
        if urbi.urbirt == "INST":
            if urbi is inst[0]:
                out += _inst(rep, inst)
            continue
        handler = _HANDLERS.get(urbi.urbirt or "")
        if handler is not None:
            out += handler(rep, urbi)
    return out


def _status(
    rep: ReplicatorView, dests: list[str], key: str, rt: str, st: str, **fields: Any
) -> list[Delivery]:
    known = [d for d in dests if d and rep.outbox.knows(d)]
    at = rep.clock.now()  # one status event: the same URBSTIME on every destination

    def part(_dest: str) -> Part:
        return status_part(rt, st, at, **fields)

    return rep.send_status(known, key, part)


# -- TRAN ------------------------------------------------------------------------------------


def _tran(rep: ReplicatorView, urbi: Element) -> list[Delivery]:
    snam, dnam, rnam, tsnr = (
        urbi.urbisnam or "",
        urbi.urbidnam or "",
        urbi.urbirnam or "",
        urbi.urbitsnr or 0,
    )
    fields = {"urbsrtok": urbi.urbirtok or "", "urbssnam": snam, "urbsdnam": dnam, "urbstsnr": tsnr}
    sub, subc = _tran_check(rep, snam, dnam)
    tx = None
    if sub is not None and not subc:
        buffer = rep.resend_buffer(sub)
        tx = buffer.find(sub.name, tsnr) if buffer else None
        subc = 0 if tx is not None else 35
    if subc or sub is None or tx is None:
        dests = [rnam] + ([dnam] if subc in TRAN_DEST_ERRORS else [])
        return _status(
            rep, dests, snam or rnam, "TRAN", "TRSP", urbsrsp=RSP, urbssubc=subc, **fields
        )
    flags = TxFlags(rsnd=True, ptrn=True)
    out = rep.send_transaction(sub, tx, tsnr, flags, [dnam] if dnam else sub.destinations)
    lag = rep.config.resend_delay_ms  # the output topics' connector lags (answer_faults.py)
    return ([d._replace(lag_ms=lag) for d in out] if lag else out) + _status(
        rep, [rnam], snam, "TRAN", "TRSP", **fields)


def _tran_check(rep: ReplicatorView, snam: str, dnam: str) -> tuple[Subscription | None, int]:
    sub = rep.config.subscription(snam)
    if sub is None:
        return None, 32
    if dnam and not rep.outbox.knows(dnam):
        return sub, 31
    if dnam and dnam not in sub.destinations:
        return sub, 33
    if rep.resend_buffer(sub) is None:
        return sub, 34
    return sub, 0


# -- STAT ------------------------------------------------------------------------------------


def _stat(rep: ReplicatorView, urbi: Element) -> list[Delivery]:
    snam, dnam, rnam = urbi.urbisnam or "", urbi.urbidnam or "", urbi.urbirnam or ""
    token = urbi.urbirtok or ""
    pairs, subc = _stat_pairs(rep, snam, dnam)
    if subc:
        return _status(
            rep,
            [rnam],
            snam or dnam,
            "STAT",
            "SUBS",
            urbsrtok=token,
            urbsrsp=RSP,
            urbssubc=subc,
            urbssnam=snam,
            urbsdnam=dnam,
        )
    out: list[Delivery] = []
    for sub, dest in pairs:
        state = rep.states[sub.name]
        out += _status(
            rep,
            [dest, rnam],
            sub.name,
            "STAT",
            "SUBS",
            urbsrtok=token,
            urbssnam=sub.name,
            urbsdnam=dest,
            urbstsnr=state.tsnr,
            urbsttim=stck(state.commit) if state.commit else 0,
            urbsptim=stck(state.processed) if state.processed else 0,
        )
    return out


def _stat_pairs(
    rep: ReplicatorView, snam: str, dnam: str
) -> tuple[list[tuple[Subscription, str]], int]:
    if not snam and not dnam:
        return [], 7
    if snam:
        sub = rep.config.subscription(snam)
        if sub is None or (dnam and dnam not in sub.destinations):
            return [], 8
        return [(sub, d) for d in sub.destinations if not dnam or d == dnam], 0
    pairs = [(s, dnam) for s in rep.config.subscriptions if dnam in s.destinations]
    return pairs, 0 if pairs else 8


# -- OPND / CLSD -----------------------------------------------------------------------------


def _destination(rep: ReplicatorView, urbi: Element) -> list[Delivery]:
    rt, dnam, rnam = urbi.urbirt, urbi.urbidnam or "", urbi.urbirnam or ""
    st = "OPEN" if rt == "OPND" else "CLOS"
    reply = [rnam] if rep.outbox.knows(rnam) else [dnam]
    fields = {"urbsrtok": urbi.urbirtok or "", "urbsdnam": dnam}
    if not rep.outbox.knows(dnam):
        return _status(rep, reply, dnam or rnam, rt, st, urbsrsp=RSP, urbssubc=26, **fields)
    if rt == "CLSD":
        out = _status(rep, reply, dnam, rt, st, **fields)
        rep.outbox.close(dnam)
        return out
    return rep.outbox.open(dnam) + _status(rep, reply, dnam, rt, st, **fields)


# -- INST ------------------------------------------------------------------------------------


def _inst(rep: ReplicatorView, urbis: list[Element]) -> list[Delivery]:
    """One INST request message: every file of the definition, or one ERRO."""
    first = urbis[0]
    inam, rnam, token = first.urbiinam or "", first.urbirnam or "", first.urbirtok or ""
    subs, subc = _inst_check(rep, urbis)
    if not subc and rep.answer_faults.inst_refused(rep.clock.now()):
        subc = TOO_MANY_REQUESTS
    if subc:
        fields = {"urbsrtok": token, "urbsinam": inam, "urbsdbid": first.urbidbid or 0,
                  "urbsfnr": first.urbifnr or 0}
        return _status(rep, [rnam], rnam or inam, "INST", "ERRO", urbsrsp=RSP, urbssubc=subc,
                       **fields)
    targets = [rnam, *dict.fromkeys(d for s in subs for d in s.destinations)]
    key = subs[0].name

    def replies(st: str) -> list[Delivery]:
        return [d for u in urbis for d in _status(
            rep, targets, key, "INST", st, urbsrtok=token, urbsinam=inam,
            urbsdbid=u.urbidbid or 0, urbsfnr=u.urbifnr or 0)]

    out = replies("INIT")
    flags = TxFlags(initial=True, token=token)
    for urbi in urbis:
        file = (urbi.urbidbid or 0, urbi.urbifnr or 0)
        for sub in (s for s in subs if file in s.file_keys()):
            for tx in _pseudo_transactions(rep, sub, file, urbi.isns):
                out += rep.send_transaction(sub, tx, 0, flags, sub.destinations)
    out = rep.answer_faults.lose_inst_message(rep.outbox, out, subs[0].destinations[0])
    return out + replies("CMPL")


def _inst_check(rep: ReplicatorView, urbis: list[Element]) -> tuple[list[Subscription], int]:
    first = urbis[0]
    definition = rep.config.initial_state(first.urbiinam or "")
    if definition is None:
        return [], 9
    subc = _inst_message_error(urbis) or _inst_files_error(definition, urbis)
    if subc:
        return [], subc
    for urbi in urbis:
        subc = _selection_error(definition, urbi)
        if subc:
            return [], subc
    asked = {(u.urbidbid, u.urbifnr) for u in urbis}
    subs = [s for s in rep.config.subscriptions if asked & set(s.file_keys())]
    return subs, 0 if subs else 70


def _inst_message_error(urbis: list[Element]) -> int:
    """Seed 000: the name and token "must be the same for all URBIs in a message" (11, 18);
    the reply destination too (10, adapya-era: "Response destinations must be same")."""
    first = urbis[0]
    for subc, field in ((11, "urbiinam"), (10, "urbirnam"), (18, "urbirtok")):
        if any(getattr(u, field) != getattr(first, field) for u in urbis):
            return subc
    return 0


def _inst_files_error(definition: InitialStateDef, urbis: list[Element]) -> int:
    """14: a URBI without DBID or FNR, or a file of the definition without its URBI; 12: a
    URBI asking for a file the definition does not have (module docstring). A definition
    over several databases is asked one database per message (or all in one): only the
    files of the databases the message names need their URBI."""
    if any(not u.urbidbid or not u.urbifnr for u in urbis):
        return 14
    asked = {(u.urbidbid, u.urbifnr) for u in urbis}
    files = set(definition.file_keys())
    if asked - files:
        return 12
    databases = {dbid for dbid, _ in asked}
    return 14 if asked != {f for f in files if f[0] in databases} else 0


def _selection_error(definition: InitialStateDef, urbi: Element) -> int:
    has_data = bool(urbi.urbilend)
    if definition.selection == "all":
        return 15 if has_data else 0
    if not has_data:
        return 19
    if urbi.isns is None:
        return 16
    try:
        validate_isns(urbi.isns)
    except ValueError:
        return 16
    return 0


def _pseudo_transactions(
    rep: ReplicatorView, sub: Subscription, file: tuple[int, int],
    isns: list[int | tuple[int, int]] | None
) -> Iterator[Transaction]:
    """The file's current records as pseudo-transactions of initial_state_chunk records."""
    chunk: list[RecordChange] = []
    for change in _selected(rep, sub, file, isns):
        chunk.append(change)
        if len(chunk) == rep.config.initial_state_chunk:
            yield _pseudo(rep, sub, file, chunk)
            chunk = []
    if chunk:
        yield _pseudo(rep, sub, file, chunk)


def _pseudo(rep: ReplicatorView, sub: Subscription, file: tuple[int, int],
            records: list[RecordChange]) -> Transaction:
    """A pseudo-transaction of the file's database, stamped on its clock (after the last
    commit of each ISN it reads: ``TransactionGenerator.read_time``)."""
    dbid, fnr = file
    commit = rep.generator.read_time(sub.name, dbid, fnr, [r.isn for r in records],
                                     rep.clock.advance(50))
    guid = INITIAL_STATE_GUID + stck(commit).to_bytes(8, "big") + bytes(12)
    return Transaction(sub.name, dbid, commit, rep.clock.advance(100), guid, tuple(records))


def _selected(
    rep: ReplicatorView, sub: Subscription, file: tuple[int, int],
    isns: list[int | tuple[int, int]] | None
) -> Iterator[RecordChange]:
    dbid, fnr = file
    records = rep.generator.file(sub.name, fnr, dbid)
    existing = records.sorted_isns()
    for item in [(existing[0], existing[-1])] if isns is None and existing else isns or []:
        if isinstance(item, tuple):
            lo, hi = bisect.bisect_left(existing, item[0]), bisect.bisect_right(existing, item[1])
            chosen = existing[lo:hi]
        else:
            chosen = [item]
        for isn in chosen:
            time = rep.clock.advance(3)
            values = records.values.get(isn)
            if values is None:
                yield RecordChange(fnr, isn, REFRESH, time, rsp=RSP_ISN_NOT_FOUND)
            else:
                after = encode_record(sub.layout, values, sub.encoding)
                yield RecordChange(fnr, isn, REFRESH, time, after=after)


_HANDLERS = {
    "TRAN": _tran,
    "STAT": _stat,
    "OPND": _destination,
    "CLSD": _destination,
}
