"""Events → rows of the Delta tables, the alerts topic and the requests topic.

Conventions (the Spark glue relies on them):
- Every time column is a timezone-aware UTC ``datetime``: STCK fields are converted with the
  TOD epoch 1900-01-01 UTC (value >> 12 = microseconds); a STCK of 0 (not set) gives None;
  processing times (``landed_at``, ``updated_at`` …) come from the step's ``now_ms``/``at_ms``.
  Alerts are JSON-able, so their times are ISO-8601 strings and ``at_ms`` ints.
- ``gaps`` holds one row per gap *transition* (open, requested, filled, unrecoverable), append
  only; a gap's current state is its latest row by ``updated_at`` (and ``transition`` order
  open < requested < filled|unrecoverable within one batch).
- Alerts and requests carry an ``idempotency_key`` built from what they describe (never from
  wall time), so a replayed batch produces the same keys and consumers can drop repeats.
- ``duplicates`` (one row per dropped duplicate) is extra, for counting; write it or not.
- ``gaps`` rows carry ``kind`` ('tsnr', or 'messages' for a hole in URBHMSNR: state 'lost',
  the message numbers in ``from_tsnr``/``to_tsnr``), and ``filled_tsnrs``/``settled_tsnrs``:
  a gap ends when each tsnr is filled or settled, and its last row says which. A settled tsnr
  that lands later adds a row in state 'filled_late' whose ``settled_tsnrs`` are the gap's
  tsnrs still lost (``missing_count`` their number).
- ``requests`` holds every request to send: ``kind`` 'TRAN' (one tsnr each, ``tsnr``,
  ``attempt``, ``gap_id``), 'INST' (one row per file of one request message: the rows of a
  message share ``request_id`` and ``idempotency_key``, each has its ``fnr`` and ``isns``;
  a file without ISNs selects none of its records) or 'STAT' (``request_id`` 'stat:<n>');
  the columns of the other kinds are None.
- ``layouts`` holds one row per GFFT (URBF) seen: the layout version's key (dbid, fnr, gfid,
  ``created`` = URBFTIM1; the raw STCK as decimal digits in ``created_stck``), ``layout_json``
  (``RecordLayout.to_dict`` with the GFFT's own column names), ``ddl``, ``gfft_json`` (URBF +
  URBG fields, from which the typed stage rebuilds the layout with the conf's ``columns``) and
  the URBF bytes (``raw``). A GFFT seen twice gives two rows with the same key: readers keep
  one per key. A GFFT no layout can be built from is a ``quarantine`` row (source ``gfft``).
- INST tracking has no table of its own: each transition is an alert ``initial_state_<state>``
  (requested, started, completed: info; overdue: warning; failed: critical) whose details name
  the request, so ``requests`` + ``alerts`` tell an INST request's whole story.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import repeat

from pipeline.payload import spark_ddl
from pipeline.reassembly.column import Column, concat, pylist
from pipeline.reassembly.events import (
    UNPLACED,
    BufferLimitExceeded,
    DuplicateDropped,
    EpochStarted,
    Event,
    GapEvent,
    GapFilled,
    GapFilledLate,
    GapOpened,
    GapRequested,
    GapUnrecoverable,
    ImageOut,
    Inconsistent,
    InitialStateChanged,
    InitialStateRequested,
    LayoutReceived,
    LayoutRejected,
    LostContinuation,
    MessagesMissing,
    MessagesUnseen,
    RecordOut,
    RequestRejected,
    StatRequested,
    StatusReceived,
    StormResumed,
    StormTripped,
    TransactionComplete,
)
from pipeline.urb import stck

TABLES = ("transactions", "records", "images", "status_events", "gaps", "alerts", "requests",
          "quarantine", "duplicates", "layouts")
TOD_EPOCH = stck.TOD_EPOCH
UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ALERT_STATUSES = frozenset({"LOST", "DEAC"})
GAP_STATES = {GapOpened: "open", GapRequested: "requested", GapFilled: "filled",
              GapUnrecoverable: "unrecoverable", GapFilledLate: "filled_late",
              MessagesMissing: "lost"}
GAP_SEVERITY = {"open": "warning", "requested": "warning", "filled": "info",
                "filled_late": "info", "lost": "warning"}
INST_SEVERITY = {"requested": "info", "started": "info", "completed": "info",
                 "overdue": "warning", "incomplete": "warning", "refused": "warning",
                 "failed": "critical"}
_INST_COLUMNS = {"initial_state": None, "dbid": None, "fnr": None, "isns": None,
                 "request_id": None}

Rows = dict[str, list[dict]]
#: table -> column -> values (``column.Column``: a list, or a numpy array from the fast path)
Columns = dict[str, dict[str, Column]]

#: The tables a landed transaction fills, and their columns in table order. They are built
#: as columns (``transaction_columns``): the direct writer turns them into Arrow arrays as
#: they are, ``events_to_rows`` into row dicts. Times are Unix microseconds there.
TRANSACTION_TABLES = ("transactions", "records", "images")
TRANSACTION_COLUMNS = (
    "subscription", "destination", "epoch", "tsnr", "dbid", "record_count", "commit_time",
    "processed_time", "sent_time", "initial_state", "resent", "possibly_resent", "origin",
    "token", "topic", "first_partition", "first_offset", "last_partition", "last_offset",
    "image_count", "landed_at")
RECORD_COLUMNS = ("subscription", "destination", "epoch", "tsnr", "rsnr", "fnr", "isn", "type",
                  "resend", "rsp", "subcode", "record_time", "dcnt", "errc")
IMAGE_COLUMNS = ("subscription", "destination", "epoch", "tsnr", "rsnr", "dsnr", "image_type",
                 "payload", "acode", "wcode", "arc")
TIME_COLUMNS = {"transactions": ("commit_time", "processed_time", "sent_time", "landed_at"),
                "records": ("record_time",), "images": ()}


def stck_to_datetime(value: int | None, offset_us: int = 0) -> datetime | None:
    """STCK (TOD clock) → UTC datetime; 0/None means the field was not set. ``offset_us``:
    what the replicator's TOD clock runs ahead of UTC (leap seconds, local time)."""
    if not value:
        return None
    return TOD_EPOCH + timedelta(microseconds=(value >> 12) - offset_us)


def stck_to_unix_us(value: int | None, offset_us: int = 0) -> int | None:
    """STCK (TOD clock) → Unix microseconds in UTC; 0/None means the field was not set."""
    return stck.stck_to_unix_us(value, offset_us) if value else None


def ms_to_datetime(ms: int) -> datetime:
    return UNIX_EPOCH + timedelta(milliseconds=ms)


def events_to_rows(events: Iterable[Event], now_ms: int, tod_offset_us: int = 0,
                   before: Columns | None = None) -> Rows:
    """Rows per table for a list of events; every table key is present (maybe empty).
    ``tod_offset_us`` is subtracted from every replicator STCK time (see stck_to_datetime);
    ``before``: transactions landed ahead of the events (the fast path's columns)."""
    out, columns = events_to_tables(events, now_ms, tod_offset_us, before)
    for table, cols in columns.items():
        out[table] = columns_to_rows(table, cols)
    return out


def events_to_tables(events: Iterable[Event], now_ms: int, tod_offset_us: int = 0,
                     before: Columns | None = None) -> tuple[Rows, Columns]:
    """Rows per table, except the landed transactions' tables, which come as columns
    (``before``'s first: transactions the fast path landed ahead of the events)."""
    out: Rows = {name: [] for name in TABLES}
    landed: list[TransactionComplete] = []
    handlers = {**_HANDLERS, **{cls: partial(fn, offset_us=tod_offset_us)
                                for cls, fn in _CLOCKED.items()}}
    for event in events:
        if isinstance(event, TransactionComplete):
            landed.append(event)
            continue
        for cls in type(event).__mro__:
            handler = handlers.get(cls)
            if handler is not None:
                handler(event, now_ms, out)
                break
    columns = transaction_columns(landed, now_ms, tod_offset_us)
    return out, columns if before is None else join_columns(before, columns)


def join_columns(first: Columns, then: Columns) -> Columns:
    """The transaction tables of ``first`` followed by those of ``then``, column by column."""
    return {table: {name: concat((values, then[table][name])) for name, values in cols.items()}
            for table, cols in first.items()}


def transaction_columns(events: Iterable[TransactionComplete], now_ms: int,
                        tod_offset_us: int = 0) -> Columns:
    """The transactions, records and images of landed transactions, column by column, in
    event order (times as Unix microseconds or None).

    Built by columns, not rows: a batch lands ~40 record and image rows per message, and the
    direct writer hands these lists to Arrow as they are."""
    tx: list[tuple] = []
    rec: dict[str, list] = {name: [] for name in RECORD_COLUMNS}
    img: dict[str, list] = {name: [] for name in IMAGE_COLUMNS}
    landed_us = now_ms * 1000

    def us(value: int) -> int | None:
        return stck_to_unix_us(value, tod_offset_us)

    for e in events:
        names = (e.subscription, e.destination, e.epoch, e.tsnr)
        tx.append((*names, e.dbid, e.record_count, us(e.commit_time), us(e.processed_time),
                   us(e.sent_time),
                   e.initial_state, e.resent, e.possibly_resent, e.origin, e.token, e.topic,
                   e.first_partition, e.first_offset, e.last_partition, e.last_offset,
                   len(e.images), landed_us))
        if e.records:
            _extend(rec, RECORD_COLUMNS[:4], names, len(e.records))
            for name, values in zip(RecordOut._fields, zip(*e.records, strict=True),
                                    strict=True):  # by field name: a reorder cannot misplace
                rec[name].extend(map(us, values) if name == "record_time"
                                 else values)
        if e.images:
            _extend(img, (*IMAGE_COLUMNS[:4], "acode", "wcode", "arc"),
                    (*names, e.acode, e.wcode, e.arc), len(e.images))
            for name, values in zip(ImageOut._fields, zip(*e.images, strict=True),
                                    strict=True):
                img[name].extend(values)
    columns = [list(c) for c in zip(*tx, strict=True)] if tx else [[] for _ in TRANSACTION_COLUMNS]
    return {"transactions": dict(zip(TRANSACTION_COLUMNS, columns, strict=True)),
            "records": rec, "images": img}


def _extend(columns: dict[str, list], names: Iterable[str], values: Iterable[object],
            n: int) -> None:
    """Repeat each value ``n`` times in its column (a transaction's keys on its rows)."""
    for name, value in zip(names, values, strict=True):
        columns[name].extend(repeat(value, n))


def columns_to_rows(table: str, columns: Mapping[str, Column],
                    keep: Iterable[int] | None = None) -> list[dict]:
    """Row dicts of one transaction table (all rows, or those at the ``keep`` positions),
    times as UTC datetimes."""
    names = list(columns)
    cols = [pylist(columns[name]) for name in names]
    times = [names.index(name) for name in TIME_COLUMNS[table]]
    source = zip(*cols, strict=True) if keep is None else ([c[i] for c in cols] for i in keep)
    rows = []
    for values in source:
        if times:
            values = list(values)
            for t in times:
                if values[t] is not None:
                    values[t] = UNIX_EPOCH + timedelta(microseconds=values[t])
        rows.append(dict(zip(names, values, strict=True)))
    return rows


def _names(e: object) -> dict:
    return {"subscription": e.subscription, "destination": e.destination,  # type: ignore[attr-defined]
            "epoch": e.epoch}  # type: ignore[attr-defined]


def _gap(e: GapEvent, now_ms: int, out: Rows) -> None:
    state = GAP_STATES[type(e)]
    closed = state in ("filled", "unrecoverable", "filled_late", "lost")
    late = isinstance(e, GapFilledLate)
    out["gaps"].append({
        **_names(e), "gap_id": e.gap_id, "from_tsnr": e.from_tsnr, "to_tsnr": e.to_tsnr,
        "state": state, "requests_sent": e.requests_sent,
        "missing_count": len(e.settled) if late else len(e.missing),
        "opened_at": ms_to_datetime(e.opened_at_ms), "updated_at": ms_to_datetime(e.at_ms),
        "closed_at": ms_to_datetime(e.at_ms) if closed else None, "reason": e.reason,
        "kind": e.kind, "filled_tsnrs": list(e.filled), "settled_tsnrs": list(e.settled),
    })
    attempt = e.attempt if isinstance(e, GapRequested) else 0
    kind = "messages_missing" if isinstance(e, MessagesMissing) else f"gap_{state}"
    suffix = f"|{attempt}" if isinstance(e, GapRequested) else f"|{e.tsnr}" if late else ""
    what = "messages" if isinstance(e, MessagesMissing) else "gap"
    _alert(out, e, kind, GAP_SEVERITY.get(state, "critical"),
           f"{what} {e.from_tsnr}..{e.to_tsnr} {state}" + (f": {e.reason}" if e.reason else ""),
           f"{e.gap_id}{suffix}",
           {"gap_id": e.gap_id, "kind": e.kind, "from_tsnr": e.from_tsnr,
            "to_tsnr": e.to_tsnr, "missing": list(e.missing), "filled": list(e.filled),
            "settled": list(e.settled), "requests_sent": e.requests_sent, "attempt": attempt,
            "reason": e.reason})
    if isinstance(e, GapRequested):
        _requests(e, out)


def _requests(e: GapRequested, out: Rows) -> None:
    out["requests"].extend({
        **_names(e), "tsnr": tsnr, "token": e.token, "reply_destination": e.reply_destination,
        "attempt": e.attempt, "gap_id": e.gap_id, "requested_at": ms_to_datetime(e.at_ms),
        "idempotency_key": f"{e.destination}|{e.subscription}|{e.epoch}|{tsnr}|{e.attempt}",
        "kind": "TRAN", **_INST_COLUMNS,
    } for tsnr in e.tsnrs)


def _inst_requested(e: InitialStateRequested, now_ms: int, out: Rows) -> None:
    """One INST request message: a row per file (the sink sends them as one message with a
    URBI each), and its info alert."""
    for dbid, fnr, isns in e.files:
        out["requests"].append({
            **_names(e), "tsnr": None, "token": e.token,
            "reply_destination": e.reply_destination, "attempt": e.attempt, "gap_id": None,
            "requested_at": ms_to_datetime(e.at_ms),
            "idempotency_key": f"{e.destination}|{e.subscription}|INST|{e.request_id}",
            "kind": "INST", "initial_state": e.name, "dbid": dbid, "fnr": fnr,
            "isns": list(isns), "request_id": e.request_id,
        })
    files = ", ".join(f"{dbid}/{fnr}" for dbid, fnr, isns in e.files if isns)
    why = f"after {e.reason}" if e.reason else f"resent transaction(s) {_short(e.tsnrs)}"
    _alert(out, e, "initial_state_requested", "info",
           f"initial state {e.name} requested for {e.isn_count} ISN(s) of file(s) {files} "
           f"({why})", f"{e.request_id}|requested",
           {"request_id": e.request_id, "state": "requested", "initial_state": e.name,
            "files": {f"{d}/{f}": len(i) for d, f, i in e.files}, "token": e.token,
            "isn_count": e.isn_count, "tsnrs": list(e.tsnrs), "rsp": 0, "subcode": 0,
            "reason": e.reason, "attempt": e.attempt, "requested_at_ms": e.at_ms})


def _stat_requested(e: StatRequested, now_ms: int, out: Rows) -> None:
    """A STAT request row (the sink sends it); routine, so no alert."""
    out["requests"].append({
        **_names(e), "tsnr": e.last_tsnr, "token": e.token,
        "reply_destination": e.reply_destination, "attempt": e.seq, "gap_id": None,
        "requested_at": ms_to_datetime(e.at_ms),
        "idempotency_key": f"{e.destination}|{e.subscription}|STAT|{e.seq}",
        "kind": "STAT", **_INST_COLUMNS, "request_id": f"stat:{e.seq}",
    })


def _inst_changed(e: InitialStateChanged, now_ms: int, out: Rows) -> None:
    """A tracked INST request's transition: an alert whose details name the request."""
    _alert(out, e, f"initial_state_{e.state}", INST_SEVERITY[e.state],
           f"initial state {e.name} for file {e.dbid}/{e.fnr} ({e.request_id}) {e.state}"
           + (f": {e.reason}" if e.reason else ""), f"{e.request_id}|{e.state}",
           {"request_id": e.request_id, "state": e.state, "initial_state": e.name,
            "dbid": e.dbid, "fnr": e.fnr, "token": e.token, "isn_count": e.isn_count,
            "rsp": e.rsp, "subcode": e.subcode, "reason": e.reason, "attempt": e.attempt,
            "requested_at_ms": e.requested_at_ms})


def _short(values: tuple[int, ...], shown: int = 5) -> str:
    text = ", ".join(map(str, values[:shown]))
    return text + (f" … ({len(values)})" if len(values) > shown else "")


def _lost(e: LostContinuation, now_ms: int, out: Rows) -> None:
    _tsnr_alert(out, e, "lost_continuation", f"transaction {e.tsnr} lost its continuation")


def _rejected(e: RequestRejected, now_ms: int, out: Rows) -> None:
    _tsnr_alert(out, e, "request_rejected", f"TRAN request for tsnr {e.tsnr} rejected")


def _tsnr_alert(out: Rows, e: LostContinuation | RequestRejected | DuplicateDropped, kind: str,
                what: str) -> None:
    """A critical alert about one tsnr seen at one Kafka position."""
    _alert(out, e, kind, "critical", f"{what}: {e.reason}",
           f"{e.tsnr}|{e.topic}|{e.partition}|{e.offset}",
           {"tsnr": e.tsnr, "reason": e.reason, "topic": e.topic, "partition": e.partition,
            "offset": e.offset})


def _storm(e: StormTripped, now_ms: int, out: Rows) -> None:
    _alert(out, e, "storm_tripped", "critical",
           f"sequence scrambled: ordering or transport problem — {e.gaps} gaps / {e.tsnrs} "
           f"tsnrs within {e.window_ms // 1000} s; requests for {e.destination}/"
           f"{e.subscription} stopped (check that the topic has one partition and the "
           f"connector keeps order; then: urbpipe gaps resume {e.destination}/"
           f"{e.subscription})", str(e.at_ms),
           {"gaps": e.gaps, "tsnrs": e.tsnrs, "window_ms": e.window_ms})


def _resumed(e: StormResumed, now_ms: int, out: Rows) -> None:
    _alert(out, e, "storm_resumed", "info",
           f"requests for {e.destination}/{e.subscription} resumed by {e.by or 'an operator'}"
           f" ({e.open_gaps} open gap(s) asked again)" + (f": {e.note}" if e.note else ""),
           str(e.at_ms), {"by": e.by, "note": e.note, "open_gaps": e.open_gaps})


def _unseen(e: MessagesUnseen, now_ms: int, out: Rows) -> None:
    _alert(out, e, "messages_unseen", "critical",
           f"URBHMSNR {e.first}..{e.last} of destination {e.destination} arrived on {e.topic} "
           f"(offset {e.offset}) below {e.low}, the lowest this job had read: the topic is out "
           f"of order (a producer without idempotence?) or they were delivered again from "
           f"before the job's first message; transactions in them were kept in duplicates "
           f"(reason '{UNPLACED} …'), not landed — land them from there",
           f"{e.first}|{e.topic}|{e.partition}|{e.offset}",
           {"first": e.first, "last": e.last, "low": e.low, "topic": e.topic,
            "partition": e.partition, "offset": e.offset})


def _epoch(e: EpochStarted, now_ms: int, out: Rows) -> None:
    # A STRT before anything was seen on the key is a normal start, not a restart to warn of.
    first_start = e.reason == "STRT" and e.previous_next_tsnr is None
    kind, severity = ("replicator_start", "info") if first_start else (
        "replicator_restart", "warning")
    _alert(out, e, kind, severity,
           f"new epoch {e.epoch}: {e.reason}", str(e.epoch),
           {"reason": e.reason, "previous_epoch": e.previous_epoch,
            "previous_next_tsnr": e.previous_next_tsnr})


def _status(e: StatusReceived, now_ms: int, out: Rows, offset_us: int = 0) -> None:
    f = e.fields

    def when(value: int) -> datetime | None:
        return stck_to_datetime(value, offset_us)

    st = str(f.get("urbsst") or "").strip()
    out["status_events"].append({
        **_names(e), "rt": _s(f, "urbsrt"), "st": st, "rsp": _i(f, "urbsrsp"),
        "subc": _i(f, "urbssubc"), "token": _s(f, "urbsrtok"), "inam": _s(f, "urbsinam"),
        "snam": _s(f, "urbssnam"), "dnam": _s(f, "urbsdnam"), "tsnr": _i(f, "urbstsnr"),
        "dbid": _i(f, "urbsdbid"), "fnr": _i(f, "urbsfnr"), "err_info": _s(f, "urbserri"),
        "data": e.data, "time": when(_i(f, "urbstime")),
        "process_time": when(_i(f, "urbsptim")), "commit_time": when(_i(f, "urbsttim")),
        "sent_time": when(e.urbhtime), "topic": e.topic,
        "partition": e.partition, "offset": e.offset, "elem_index": e.elem_index,
        "fields_json": _json(f), "received_at": ms_to_datetime(e.at_ms),
        "big_endian": e.big_endian,
    })
    if st in ALERT_STATUSES:
        _alert(out, e, f"status_{st.lower()}", "critical", f"replicator status {st}",
               f"{e.topic}|{e.partition}|{e.offset}|{e.elem_index}",
               {"st": st, "rsp": _i(f, "urbsrsp"), "subc": _i(f, "urbssubc"),
                "dbid": _i(f, "urbsdbid"), "fnr": _i(f, "urbsfnr")})


def _buffer(e: BufferLimitExceeded, now_ms: int, out: Rows) -> None:
    _alert(out, e, "buffer_limit", "critical",
           f"buffered {e.buffered_bytes} bytes > {e.limit}: {e.action}",
           f"{e.tsnr}|{e.action}",
           {"tsnr": e.tsnr, "buffered_bytes": e.buffered_bytes, "limit": e.limit,
            "action": e.action})


def _inconsistent(e: Inconsistent, now_ms: int, out: Rows) -> None:
    out["quarantine"].append({
        **_names(e), "kind": "inconsistent", "source": "reassembly", "tsnr": e.tsnr,
        "reason": e.reason,
        "topic": e.topic, "partition": e.partition, "offset": e.offset,
        "elem_index": e.elem_index, "eye": e.eye, "raw": None, "fields_json": _json(e.details),
        "quarantined_at": ms_to_datetime(e.at_ms),
    })


def _layout(e: LayoutReceived, now_ms: int, out: Rows, offset_us: int = 0) -> None:
    lay = e.layout
    assert lay is not None and lay.key is not None
    out["layouts"].append({
        **_names(e), "dbid": lay.key.dbid, "fnr": lay.key.fnr, "gfid": lay.key.gfid,
        "created": stck_to_datetime(lay.key.created, offset_us),
        "created_stck": str(lay.key.created),
        "file_name": _s(e.fields, "urbffnam"), "field_count": len(e.fields.get("groups") or ()),
        "layout_json": json.dumps(lay.to_dict(), sort_keys=True), "ddl": spark_ddl(lay),
        "gfft_json": _json(e.fields), "raw": e.data, "topic": e.topic, "partition": e.partition,
        "offset": e.offset, "elem_index": e.elem_index,
        "sent_time": stck_to_datetime(e.urbhtime, offset_us),
        "received_at": ms_to_datetime(e.at_ms),
    })


def _layout_rejected(e: LayoutRejected, now_ms: int, out: Rows) -> None:
    out["quarantine"].append({
        **_names(e), "source": "gfft", "tsnr": None, "reason": e.reason, "topic": e.topic,
        "partition": e.partition, "offset": e.offset, "elem_index": e.elem_index,
        "eye": "URBF", "raw": e.data, "fields_json": _json(e.fields),
        "quarantined_at": ms_to_datetime(e.at_ms),
    })


def _duplicate(e: DuplicateDropped, now_ms: int, out: Rows) -> None:
    out["duplicates"].append({
        **_names(e), "tsnr": e.tsnr, "reason": e.reason, "topic": e.topic,
        "partition": e.partition, "offset": e.offset, "dropped_at": ms_to_datetime(e.at_ms),
    })
    if e.reason.startswith(UNPLACED):
        _tsnr_alert(out, e, "transaction_unplaced",
                    f"tsnr {e.tsnr} came after later ones — the topic is out of order (a "
                    f"producer without idempotence?) or was delivered again from before the "
                    f"job's first message; kept in duplicates, not landed: land it from there")


def _alert(out: Rows, e: object, kind: str, severity: str, message: str, ident: str,
           details: dict) -> None:
    at_ms: int = e.at_ms  # type: ignore[attr-defined]
    names = _names(e)
    out["alerts"].append({
        "idempotency_key": f"{kind}|{names['destination']}|{names['subscription']}|"
                           f"{names['epoch']}|{ident}",
        "kind": kind, "severity": severity, **names, "message": message,
        "at": ms_to_datetime(at_ms).isoformat(), "at_ms": at_ms, "details": details,
    })


def _s(f: dict, name: str) -> str:
    value = f.get(name)
    return "" if value is None else str(value).strip()


def _i(f: dict, name: str) -> int:
    value = f.get(name)
    return int(value) if isinstance(value, int | float) else 0


def _json(fields: dict) -> str:
    return json.dumps(fields, sort_keys=True, default=_jsonable)


def _jsonable(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return str(value)


#: Handlers of events with replicator times: given the TOD clock's offset per call.
_CLOCKED: dict[type, Callable[..., None]] = {StatusReceived: _status, LayoutReceived: _layout}
_HANDLERS: dict[type, Callable[..., None]] = {
    GapEvent: _gap, LostContinuation: _lost,
    EpochStarted: _epoch, MessagesUnseen: _unseen, StatusReceived: _status,
    BufferLimitExceeded: _buffer,
    Inconsistent: _inconsistent, DuplicateDropped: _duplicate,
    InitialStateRequested: _inst_requested, InitialStateChanged: _inst_changed,
    LayoutReceived: _layout, LayoutRejected: _layout_rejected, StatRequested: _stat_requested,
    RequestRejected: _rejected, StormTripped: _storm, StormResumed: _resumed,
}
