"""What the machine tells the outside world. Every event is plain, frozen data.

The Spark glue turns events into table rows (see ``tables.events_to_rows``), TRAN requests
(one per tsnr of a ``GapRequested``) and alerts. Times are kept raw here: ``at_ms`` is the
step's processing time in epoch milliseconds, STCK fields are the replicator's raw 64-bit
values, and conversion happens in ``tables``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from pipeline.payload.layout import RecordLayout

Origin = str  # "live" | "resend" | "initial_state" | "reconcile"


class RecordOut(NamedTuple):
    """One URBR of a landed transaction. ``record_time`` is URBRTIME (raw STCK).

    A NamedTuple, like ``ImageOut``: one is built per URBR, so construction cost counts.
    """

    rsnr: int
    fnr: int
    isn: int
    type: str
    resend: bool
    rsp: int
    subcode: int
    record_time: int
    dcnt: int
    errc: str = ""


class ImageOut(NamedTuple):
    """One URBD: image_type is A (after), B (before) or K (key before image)."""

    rsnr: int
    dsnr: int
    image_type: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class TransactionComplete:
    """A whole transaction, ready to land. Times are raw STCK values."""

    subscription: str
    destination: str
    epoch: int
    tsnr: int
    dbid: int
    record_count: int
    commit_time: int      # URBTTTIM
    processed_time: int   # URBTPTIM
    sent_time: int        # URBHTIME of the message holding the URBT
    initial_state: bool   # URBTINST='Y'
    resent: bool          # URBTPTRN='Y': answer to a prior-transaction request
    possibly_resent: bool  # URBTRSND='Y'
    origin: Origin
    token: str            # URBTRTOK
    topic: str
    first_partition: int
    first_offset: int
    last_partition: int
    last_offset: int
    acode: int            # URBTACOD
    wcode: int            # URBTWCOD
    arc: int              # URBTARC
    records: tuple[RecordOut, ...]
    images: tuple[ImageOut, ...]
    at_ms: int


@dataclass(frozen=True, slots=True)
class TsnrNotice:
    """Common shape of events about one tsnr seen at one Kafka position."""

    subscription: str
    destination: str
    epoch: int
    tsnr: int
    reason: str
    topic: str
    partition: int
    offset: int
    at_ms: int


#: How a DuplicateDropped's reason begins when the transaction was never landed here: below
#: the first tsnr placed in its epoch (``machine.Machine._drop_reason``); it is an alert too.
UNPLACED = "never landed"


@dataclass(frozen=True, slots=True)
class DuplicateDropped(TsnrNotice):
    """A transaction (or a continuation message of one) already landed; dropped, counted.
    A reason beginning with :data:`UNPLACED` is one the job cannot tell from a copy but never
    landed (an out-of-order topic): kept, counted, and alerted."""


@dataclass(frozen=True, slots=True)
class RequestRejected(TsnrNotice):
    """The replicator rejected a TRAN request with an error a retry cannot fix (unknown
    subscription or destination, a malformed request …): the tsnr is settled at once and
    operators must fix the cause (``reason`` names it). Reported once per gap and cause."""


@dataclass(frozen=True, slots=True)
class GapEvent:
    """Common shape of the gap lifecycle events (open → requested → filled|unrecoverable).

    ``gap_id`` is stable for the gap's life; ``missing`` lists the tsnrs still missing that
    can still be requested (or wait for a reactivation: TRSP 36); ``filled`` the tsnrs that
    arrived, ``settled`` those given up one by one (a TRSP error, the verdict, a restart …):
    a gap ends when every tsnr is filled or settled. ``requests_sent`` counts TRAN requests
    sent for this gap so far. A gap across the wrap has ``from_tsnr > to_tsnr``. ``kind`` is
    ``tsnr`` (a hole in the transaction sequence) or ``messages`` (URBHMSNR: messages of a
    destination that never arrived; nothing can be asked for them).
    """

    subscription: str
    destination: str
    epoch: int
    gap_id: str
    from_tsnr: int
    to_tsnr: int
    missing: tuple[int, ...]
    requests_sent: int
    opened_at_ms: int
    reason: str
    at_ms: int
    filled: tuple[int, ...] = ()
    settled: tuple[int, ...] = ()
    kind: str = "tsnr"


@dataclass(frozen=True, slots=True)
class GapOpened(GapEvent):
    """A range of tsnrs is missing."""


@dataclass(frozen=True, slots=True)
class GapRequested(GapEvent):
    """Ask the replicator to resend ``tsnrs`` (one TRAN request each), round ``attempt``."""

    tsnrs: tuple[int, ...] = ()
    attempt: int = 1
    token: str = ""
    reply_destination: str = ""


@dataclass(frozen=True, slots=True)
class GapFilled(GapEvent):
    """Every tsnr of the gap has landed."""


@dataclass(frozen=True, slots=True)
class GapUnrecoverable(GapEvent):
    """The gap ended with at least one tsnr settled as lost (TRSP error, retries exhausted,
    restart, too wide …); ``filled`` and ``settled`` say which tsnrs came and which did not."""


@dataclass(frozen=True, slots=True)
class GapFilledLate(GapEvent):
    """A settled tsnr of an ended gap arrived after all (a late resend, a delayed or
    redelivered message): it landed. ``settled`` lists the gap's tsnrs still lost."""

    tsnr: int = 0


@dataclass(frozen=True, slots=True)
class MessagesMissing(GapEvent):
    """URBHMSNR of a destination skipped ``from_tsnr``..``to_tsnr`` (message numbers, in the
    ``tsnr`` columns): those messages never arrived. Status-only messages (DEAC, LOST, AUTI,
    INST/CMPL …) have no tsnr, so this is the only trace of their loss."""


@dataclass(frozen=True, slots=True)
class MessagesUnseen:
    """URBHMSNR ``first``..``last`` of a destination arrived below ``low``, every number the
    job had read of this numbering (``numbering.Numbering.unseen_before``): written out of
    order, or delivered again from before the job's first message. Transactions in them are
    kept in ``duplicates`` (reason :data:`UNPLACED`) and not landed; the operator is told."""

    subscription: str
    destination: str
    epoch: int
    first: int
    last: int
    low: int
    topic: str
    partition: int
    offset: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class LostContinuation(TsnrNotice):
    """A transaction whose continuation never came (or was broken); it was not landed."""


@dataclass(frozen=True, slots=True)
class EpochStarted:
    """The replicator (re)started numbering: URBS STRT/REST, or tsnr back to 1/backwards."""

    subscription: str
    destination: str
    epoch: int
    reason: str
    previous_epoch: int
    previous_next_tsnr: int | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class StormTripped:
    """The key opened more gaps or asked for more tsnrs within ``window_ms`` of replicator
    time than any healthy stream would: the sequence is scrambled (several partitions,
    reordering, a misrouted topic). Requests for the key stop until an operator resumes."""

    subscription: str
    destination: str
    epoch: int
    gaps: int
    tsnrs: int
    window_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class StormResumed:
    """An operator resumed requests for a key whose storm breaker had tripped."""

    subscription: str
    destination: str
    epoch: int
    by: str
    note: str
    open_gaps: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class StatRequested:
    """Ask the replicator for the subscription/destination's status (STAT; reply SUBS with
    the last tsnr it sent): an idle key's last transaction may have been lost."""

    subscription: str
    destination: str
    epoch: int
    seq: int
    token: str
    reply_destination: str
    last_tsnr: int | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class ElementSeen:
    """Common shape of events about one element at one Kafka position: its fields and data."""

    subscription: str
    destination: str
    epoch: int
    fields: dict[str, object]
    data: bytes | None
    topic: str
    partition: int
    offset: int
    elem_index: int
    urbhtime: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class StatusReceived(ElementSeen):
    """A URBS element with all its fields and data (landed in ``status_events``).

    ``big_endian``: the byte order of the message it came in (URBHBORD), which its URBSDATA
    (RPLS/RPLE file lists, the URBSU detail of AUTI) is written in; None when not known."""

    big_endian: bool | None = None


@dataclass(frozen=True, slots=True)
class BufferLimitExceeded:
    """Buffered payload bytes for the key passed ``max_buffered_bytes``."""

    subscription: str
    destination: str
    epoch: int
    tsnr: int
    buffered_bytes: int
    limit: int
    action: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class Inconsistent:
    """Input that breaks the URB rules (counts, continuity, orphans); goes to quarantine."""

    subscription: str
    destination: str
    epoch: int
    tsnr: int | None
    reason: str
    topic: str
    partition: int
    offset: int
    elem_index: int
    at_ms: int
    eye: str = ""
    details: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InitialStateRequested:
    """Ask the replicator for the current images of some ISNs (one INST request message).

    Raised after a resend (before images only) landed: its inserted/updated ISNs are
    unverified until their R images arrive; or again after ISNs of an earlier request did
    not arrive, or it was refused as one too many (``reason``, ``attempt``). ``files`` holds
    one (dbid, fnr, ISNs) per file of the definition, in its order: R14 wants a URBI for
    every file of a multi-file definition, so a file with nothing to refresh has no ISNs
    (the request selects none of its records). ``request_id`` ("job:<n>", n counting per
    key) identifies the request in the tracking alerts; ``tsnrs`` are the resent
    transactions the ISNs came from.
    """

    subscription: str
    destination: str
    epoch: int
    request_id: str
    name: str             # URBIINAM: the initial-state definition
    files: tuple[tuple[int, int, tuple[int, ...]], ...]
    tsnrs: tuple[int, ...]
    token: str
    reply_destination: str
    at_ms: int
    reason: str = ""
    attempt: int = 1

    @property
    def isn_count(self) -> int:
        return sum(len(isns) for _, _, isns in self.files)


@dataclass(frozen=True, slots=True)
class InitialStateChanged:
    """A tracked INST request moved on: started (INIT), completed (CMPL, every ISN asked for
    arrived), failed (ERRO, CMPL with a response code, or still incomplete after the last
    attempt), overdue (no CMPL/ERRO within the timeout), incomplete (ISNs did not arrive or
    a pseudo-transaction of it was lost: the job asks again for them) or refused (INST/ERRO
    131/44, too many requests active: sent again after a backoff).

    ``request_id`` is the job's id ("job:<n>") or, for a request the job did not send (e.g.
    ``urbpipe request inst``), "ext:<token>:<URBSTIME of its first reply>".
    """

    subscription: str
    destination: str
    epoch: int
    request_id: str
    state: str
    name: str
    dbid: int
    fnr: int
    token: str
    rsp: int
    subcode: int
    reason: str
    isn_count: int
    requested_at_ms: int
    at_ms: int
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class GfftEvent(ElementSeen):
    """Common shape of a GFFT (URBF + URBGs) seen in the stream.

    ``fields`` is the URBF's fields with ``groups`` (``pipeline.payload.gfft.gfft_fields``),
    ``data`` the URBF element's bytes as sent (None when the glue could not cut them out).
    A GFFT is not transaction data: it never enters the key's state, so a repeated GFFT
    (a redelivered message) is simply reported again with the same layout key.
    """


@dataclass(frozen=True, slots=True)
class LayoutReceived(GfftEvent):
    """A record layout version of (dbid, fnr) for this subscription (lands in ``layouts``);
    ``layout.key`` is (URBFDBID, URBFFNR, URBFGFID, URBFTIM1). Columns are the GFFT's own
    (snake-case long names); the typed stage applies the conf's ``columns`` to ``gfft``."""

    layout: RecordLayout | None = None


@dataclass(frozen=True, slots=True)
class LayoutRejected(GfftEvent):
    """A GFFT no layout can be built from (``reason``); goes to ``quarantine``."""

    reason: str = ""


Event = (
    TransactionComplete | DuplicateDropped | GapOpened | GapRequested | GapFilled
    | GapUnrecoverable | GapFilledLate | MessagesMissing | MessagesUnseen | LostContinuation
    | EpochStarted
    | StatusReceived | BufferLimitExceeded | Inconsistent | InitialStateRequested
    | RequestRejected
    | InitialStateChanged | LayoutReceived | LayoutRejected | StormTripped | StormResumed
    | StatRequested
)
