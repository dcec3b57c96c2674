"""Initial-state pseudo-transactions (tsnr 0): copies told from new ones, and what arrived.

Pseudo-transactions are outside the tsnr sequence, so a copy the transport delivers again
(at-least-once, however far back) cannot be told by its position. It is told by when the
replicator sent it: a connector's copy keeps the original's URBHTIME byte for byte, and on
the destination's own topic every new message was sent after everything before it — so a
pseudo-transaction whose first message is not newer than every message seen on the
destination (``Partial.fresh``) was delivered before. The one exception is a message the
transport wrote out of order: it is new although older, and it is recognised by what it
brings — ISNs an open request of the job's asked for, sent after that request's INIT, that
have not arrived yet. Memory: none per pseudo-transaction, only the ISNs of the job's open
requests (bounded by the request), whatever the number of pseudo-transactions.

What arrived: each record of a landed pseudo-transaction answers an ISN of the oldest open
request of the job's for its (token, dbid, fnr) that still waits for it (``InstTrack
.received``); ``initial_state`` compares at the request's CMPL.
"""

from __future__ import annotations

from pipeline.reassembly.assembler import Partial
from pipeline.reassembly.events import Origin
from pipeline.reassembly.initial_state import InstState, InstTrack

#: Every request token ``urbpipe reconcile`` sends starts with this (URBTRTOK, 8 characters):
#: the answers' pseudo-transactions land with origin ``reconcile``.
RECONCILE_TOKEN_PREFIX = "RCN"
#: The origin of the rows such a pseudo-transaction lands.
RECONCILE_ORIGIN: Origin = "reconcile"


def origin(p: Partial) -> Origin:
    """A pseudo-transaction's origin: ``reconcile`` when it answers a reconciliation round's
    request (its token), else ``initial_state``."""
    return (RECONCILE_ORIGIN if p.token.startswith(RECONCILE_TOKEN_PREFIX)
            else "initial_state")


def is_copy(inst: InstState, p: Partial) -> bool:
    """``p`` (complete, tsnr 0) was delivered before: not fresh, and no open request of the
    job's is waiting for any of its ISNs since before it was sent."""
    if p.fresh:
        return False
    return not any(_awaiting(inst, p, r.fnr, r.isn) for r in p.records)


def note_received(inst: InstState, p: Partial) -> None:
    """Count ``p``'s records as answers to the job's open requests."""
    for r in p.records:
        track = _awaiting(inst, p, r.fnr, r.isn)
        if track is not None:
            track.received.append(r.isn)


def _awaiting(inst: InstState, p: Partial, fnr: int, isn: int) -> InstTrack | None:
    """The oldest open request of the job's for this pseudo-transaction's token, database and
    file whose ISNs include ``isn`` not yet arrived, and whose INIT came before it was sent
    (an earlier request's answer is no answer to this one)."""
    for t in inst.tracks:
        if (t.isns and t.token == p.token and t.dbid == p.head["urbtdbid"] and t.fnr == fnr
                and t.init_time <= p.sent_time and isn in t.isns and isn not in t.received):
            return t
    return None
