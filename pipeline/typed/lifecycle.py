"""Utility and lifecycle statuses → what they mean for a file's typed tables.

IBM i's QDBRPLAY (seed 004) replays DDL journal entries — create, change, delete, rename file,
refresh table — on another system, so the copy keeps the shape of the original. The Event
Replicator reports the Adabas equivalents as URBS statuses: AUTI with a URBSU detail per
utility function (change field length/format, add fields, refresh/delete/rename/define file …)
and bracketing statuses for utilities whose effect on the data never arrives as row events
(ADALOD LOAD/UPDATE, ADASAV RESTORE, ADARES REGENERATE/BACKOUT, ADARPL replay), plus LOST and
DEAC when replication itself may have missed changes. This module replays them on the lake:

* ``interpret`` turns one ``status_events`` row into a :class:`LifecycleEvent` — the action it
  implies (truncate, add columns, widen, mark dropped/stale, clear stale, rename, or recorded
  only) and its detail — or None for statuses that say nothing about a file (STRT, SUBS, C5DA …).
* ``targets`` picks the configured layouts (typed tables) the event concerns.
* ``widen_decision`` decides what a changed field length/format means for a layout's tables:
  a widening Delta applies in place (``pipeline.typed.widening``) when the layout already
  reads the field's new length/format, else the file is stale (kind ``layout``) until a
  layout ``covers`` it (``pending_changes``: what AUTI said each field became).
* ``transition`` is the per-file status machine (active / stale / dropped) the ``file_status``
  table records.

Plain Python; ``pipeline.spark.typed.lifecycle`` applies the actions with Delta.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from pipeline.config import typed_table_suffix
from pipeline.payload import LayoutError
from pipeline.payload.layout import FieldSpec, GroupSpec, RecordLayout
from pipeline.typed.layouts import column_types
from pipeline.typed.widening import normal_type, widen_steps, widening
from pipeline.urb.layouts import (
    DETAIL_BIG,
    DETAIL_LITTLE,
    URBSU_BIG,
    URBSU_LITTLE,
    UTILITY_NAMES,
)


class Action(StrEnum):
    """What a lifecycle event does to a file's typed tables."""

    TRUNCATE = "truncate"          # current state emptied (refresh file, define file)
    ADD_COLUMNS = "add_columns"    # layout fields missing in the tables become columns
    WIDEN = "widen"                # a column's type grows with a field's new length/format
    MARK_DROPPED = "mark_dropped"  # the Adabas file was deleted
    MARK_STALE = "mark_stale"      # data may have changed without row events
    CLEAR_STALE = "clear_stale"    # the utility that made the file stale ended cleanly
    RENAME = "rename"              # the file got a new name (tables stay keyed by fnr)
    RECORD = "recorded"            # recorded only: no effect on typed data


class FileState(StrEnum):
    ACTIVE = "active"
    STALE = "stale"
    DROPPED = "dropped"


# URBSUTYP → (action, stale kind for a MARK_STALE).
_UTILITY_ACTIONS: Mapping[int, Action] = {
    0x41: Action.WIDEN,        # change field length
    0x44: Action.MARK_DROPPED,  # delete file
    0x48: Action.TRUNCATE,     # refresh file
    0x4B: Action.RENAME,       # rename file
    0x57: Action.TRUNCATE,     # define file: a new, empty file under this number
    0x58: Action.ADD_COLUMNS,  # write FDT
    0x59: Action.ADD_COLUMNS,  # add new fields
    0x5C: Action.WIDEN,        # change field format
}

#: Statuses that open a window in which rows change without row events: status → stale kind.
STALE_START: Mapping[str, str] = {
    "LODS": "load", "UPDS": "update", "RPLS": "replay", "SAVS": "restore",
    "RESS": "regenerate", "LOST": "lost", "DEAC": "deactivated", "DCMP": "decompression",
}
#: Ends whose utility sends its rows as transactions (URBTUTOK = URBSUTOK): a clean end
#: (response 0) means the lake saw them all, so the stale kind clears.
CLEARING_END: Mapping[str, str] = {"LODE": "load", "UPDE": "update", "RPLE": "replay"}
#: Ends of utilities that change the database below the replicator: the file stays stale.
STALE_END: Mapping[str, str] = {"SAVE": "restore", "RESE": "regenerate"}
#: Statuses recorded for a file without an effect on its tables.
RECORDED: frozenset[str] = frozenset({"REAC", "REFR"})
LIFECYCLE_STATUSES: frozenset[str] = frozenset(
    {"AUTI", *STALE_START, *CLEARING_END, *STALE_END, *RECORDED})

_WHY_STALE: Mapping[str, str] = {
    "load": "ADALOD LOAD running: loaded records arrive as utility transactions",
    "update": "ADALOD UPDATE running: its records arrive as utility transactions",
    "replay": "ADARPL replay running: replayed transactions still arriving",
    "restore": "ADASAV RESTORE: the file was restored below the replicator; reload it "
               "(initial state)",
    "regenerate": "ADARES REGENERATE/BACKOUT changed the file below the replicator; reload it "
                  "(initial state)",
    "lost": "replication data possibly lost (LOST)",
    "deactivated": "replication deactivated (DEAC): changes made meanwhile never arrive",
    "decompression": "decompression error (DCMP): an image could not be sent",
    "layout": "the layout no longer matches the file",
}
_EBCDIC_EYE = "URBSU".encode("cp037")


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One status event, read for its effect on files.

    ``files`` are the file numbers it concerns (one for AUTI and the file statuses, the URBSDATA
    list for RPLS/RPLE, empty when the status names no file: then every configured file of the
    subscription/database). ``at`` is the cutoff of a truncate: rows whose version
    (commit_time) is older than it belonged to the file before the event.
    """

    event_id: str
    subscription: str
    destination: str
    st: str
    dbid: int
    files: tuple[int, ...]
    action: Action
    reason: str
    at: datetime | None
    rsp: int = 0
    utility_type: int | None = None
    utility: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)
    stale_kind: str | None = None
    received_at: datetime | None = None  # when the job landed the status (batch time)

    @property
    def fieldname(self) -> str:
        return str(self.detail.get("fieldname") or "")


# ------------------------------------------------------------------------- interpretation
def interpret(row: Mapping[str, Any], big_endian: bool | None = None) -> LifecycleEvent | None:
    """A ``status_events`` row → its lifecycle event, or None when it concerns no file.

    URBSDATA (an RPLS/RPLE file list, the URBSU detail of AUTI) is in its message's byte order,
    which the row carries (``big_endian``, from URBHBORD). Rows landed before that column
    existed fall back to the ``big_endian`` argument (an EBCDIC subscription: a mainframe) and
    then to the reading with the smaller numbers.
    """
    landed = row.get("big_endian")
    if landed is not None:
        big_endian = bool(landed)
    st = str(row.get("st") or "").strip()
    if st not in LIFECYCLE_STATUSES:
        return None
    data = bytes(row.get("data") or b"")
    base = {
        "event_id": event_id(row), "subscription": str(row.get("subscription") or ""),
        "destination": str(row.get("destination") or ""), "st": st,
        "dbid": int(row.get("dbid") or 0), "rsp": int(row.get("rsp") or 0),
        "at": row.get("commit_time") or row.get("time") or row.get("received_at"),
        "received_at": row.get("received_at"),
    }
    fnr = int(row.get("fnr") or 0)
    if st == "AUTI":
        return _utility(base, fnr, data, big_endian)
    files = _file_list(data, big_endian) if st in ("RPLS", "RPLE") else ()
    files = files or ((fnr,) if fnr else ())
    return _status(base, files)


def event_id(row: Mapping[str, Any]) -> str:
    """Where the status came from: the same status on two destinations has two ids."""
    return "|".join(str(row.get(k)) for k in ("destination", "topic", "partition", "offset",
                                               "elem_index"))


def _status(base: dict[str, Any], files: tuple[int, ...]) -> LifecycleEvent:
    st, rsp = base["st"], base["rsp"]
    if st in STALE_START:
        kind = STALE_START[st]
        return LifecycleEvent(**base, files=files, action=Action.MARK_STALE,
                              reason=_WHY_STALE[kind], stale_kind=kind)
    if st in CLEARING_END:
        kind = CLEARING_END[st]
        if rsp:
            return LifecycleEvent(**base, files=files, action=Action.MARK_STALE, stale_kind=kind,
                                  reason=f"{st} ended with response {rsp}: the file stays stale")
        return LifecycleEvent(**base, files=files, action=Action.CLEAR_STALE, stale_kind=kind,
                              reason=f"{st}: {kind} ended cleanly, its rows have arrived")
    if st in STALE_END:
        kind = STALE_END[st]
        return LifecycleEvent(**base, files=files, action=Action.MARK_STALE,
                              reason=_WHY_STALE[kind], stale_kind=kind)
    why = ("replication reactivated; changes made while deactivated did not arrive"
           if st == "REAC" else "replicator resource refreshed (no file content changed)")
    return LifecycleEvent(**base, files=files, action=Action.RECORD, reason=why)


def _utility(base: dict[str, Any], fnr: int, data: bytes,
             big_endian: bool | None) -> LifecycleEvent:
    files = (fnr,) if fnr else ()
    detail = decode_urbsu(data, big_endian)
    if detail is None:
        return LifecycleEvent(**base, files=files, action=Action.RECORD,
                              reason=f"AUTI without a URBSU detail ({len(data)} bytes)")
    typ = int(detail.pop("urbsutyp"))
    name = UTILITY_NAMES.get(typ, f"utility X'{typ:02X}'")
    action = _UTILITY_ACTIONS.get(typ, Action.RECORD)
    return LifecycleEvent(**base, files=files, action=action, reason=_utility_reason(name, detail),
                          utility_type=typ, utility=name, detail=detail)


def _utility_reason(name: str, detail: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in sorted(detail.items()) if v not in ("", None))
    return f"{name} ({shown})" if shown else name


def decode_urbsu(data: bytes, big_endian: bool | None = None) -> dict[str, Any] | None:
    """The URBSU head and its utility detail from URBSDATA; None when it is not a URBSU.

    Text fields tell the form (the eye-catcher is 'URBSU' in EBCDIC or ASCII). Numbers are in
    the message's byte order: ``big_endian`` when known (URBHBORD, landed with the status);
    else EBCDIC data is taken as a mainframe's (big endian) and ASCII data is read both ways,
    the reading with the smaller magnitudes winning (field lengths, flags and file numbers are
    small), little endian on a tie.
    """
    if len(data) < URBSU_BIG.size:
        return None
    ebcdic = data.startswith(_EBCDIC_EYE)
    if not ebcdic and not data.startswith(b"URBSU"):
        return None
    text = data.decode("cp037" if ebcdic else "latin-1")
    orders = (big_endian,) if big_endian is not None else (True,) if ebcdic else (False, True)
    readings = [_read_urbsu(data, text, big) for big in orders]
    return min(readings, key=_magnitude)


def _read_urbsu(data: bytes, text: str, big: bool) -> dict[str, Any]:
    head = URBSU_BIG if big else URBSU_LITTLE
    out = dict(head.full.build(data, text, 0))
    detail = (DETAIL_BIG if big else DETAIL_LITTLE).get(out["urbsutyp"])
    rest = len(data) - head.size
    if detail is not None and rest > 0:
        out.update(detail.variant(rest).build(data, text, head.size))
    out.pop("urbsueye", None)
    return out


def _magnitude(fields: Mapping[str, Any]) -> int:
    return max((abs(v) for k, v in fields.items() if isinstance(v, int) and k != "urbsutyp"),
               default=0)


def _file_list(data: bytes, big_endian: bool | None) -> tuple[int, ...]:
    """RPLS/RPLE URBSDATA: 2-byte file numbers in the message's byte order."""
    count = len(data) // 2
    if not count:
        return ()
    orders = ["little", "big"] if big_endian is None else ["big" if big_endian else "little"]
    readings = [tuple(int.from_bytes(data[i:i + 2], o) for i in range(0, 2 * count, 2))
                for o in orders]
    return min(readings, key=max)


# ------------------------------------------------------------------------- targets
@dataclass(frozen=True, slots=True)
class Target:
    """A configured layout's identity: enough to name and decode its typed tables
    (``primary_dbid``: its subscription's primary database, which the name depends on)."""

    subscription: str
    dbid: int
    fnr: int
    primary_dbid: int | None = None

    @property
    def suffix(self) -> str:
        return typed_table_suffix(self.subscription, self.dbid, self.fnr, self.primary_dbid)


def targets(event: LifecycleEvent, layouts: Iterable[Target]) -> list[Target]:
    """The layouts an event concerns: same database (when the status names one), one of its
    files (all files when it names none), and its subscription (when it names one)."""
    return [t for t in layouts
            if (not event.dbid or t.dbid == event.dbid)
            and (not event.files or t.fnr in event.files)
            and (not event.subscription or t.subscription == event.subscription)]


def files_of(event: LifecycleEvent, layouts: Sequence[Target]) -> list[tuple[int, int]]:
    """(dbid, fnr) of every file whose status the event changes: named ones, else the
    targets' files."""
    if event.files and event.dbid:
        return [(event.dbid, f) for f in event.files]
    return sorted({(t.dbid, t.fnr) for t in targets(event, layouts)})


# ------------------------------------------------------------------------- widening
@dataclass(frozen=True, slots=True)
class FieldChange:
    """What AUTI says a field became (change field length X'41': ``length``; change field
    format X'5C': ``format``); None: not changed by it."""

    name: str
    length: int | None = None
    format: str | None = None

    def __str__(self) -> str:
        return " ".join(str(x) for x in (self.name, self.length, self.format) if x)


def field_change(detail: Mapping[str, Any]) -> FieldChange:
    """The change an AUTI change field length/format detail (URBSU) reports."""
    length = detail.get("newlength")
    fmt = str(detail.get("newformat") or "").strip()
    return FieldChange(str(detail.get("fieldname") or ""), int(length) if length else None,
                       fmt or None)


def pending_changes(changes: Iterable[tuple[Any, FieldChange]]) -> dict[str, FieldChange]:
    """(time, change) → each field's state after all of them, in time order: the latest
    length and the latest format AUTI reported (a length change keeps an earlier format)."""
    out: dict[str, FieldChange] = {}
    for _, change in sorted(changes, key=lambda c: (c[0] is not None, c[0] or 0)):
        prev = out.get(change.name) or FieldChange(change.name)
        out[change.name] = FieldChange(change.name, change.length or prev.length,
                                       change.format or prev.format)
    return out


def _find(layout: RecordLayout, name: str) -> tuple[FieldSpec | None, GroupSpec | None]:
    """The field ``name`` reads, and the PE group it is a member of (None at the top level)."""
    for item in layout.items:
        if isinstance(item, FieldSpec) and item.name == name:
            return item, None
        if isinstance(item, GroupSpec):
            member = next((m for m in item.members if m.name == name), None)
            if member is not None:
                return member, item
    return None, None


def covers(layout: RecordLayout, change: FieldChange) -> bool:
    """Whether ``layout`` reads the field as it now is: at least its new length, in its new
    format. A field the layout does not read is covered (nothing of it is cut)."""
    spec, _ = _find(layout, change.name)
    return spec is None or ((change.length is None or change.length <= spec.length)
                            and (change.format is None or change.format == spec.format))


def uncovered(layout: RecordLayout, pending: Mapping[str, FieldChange]) -> list[FieldChange]:
    return [c for _, c in sorted(pending.items()) if not covers(layout, c)]


@dataclass(frozen=True, slots=True)
class WidenPlan:
    """The column a changed field maps to: its type as the layout reads it now
    (``old_type``), under the field's new length/format (``new_type``; None when that is not
    valid for the field: ``problem``), and whether the layout already reads the change."""

    column: str
    old_type: str
    new_type: str | None
    problem: str = ""
    covered: bool = False
    length: int = 0      # how the layout reads the field
    format: str = ""
    group: str = ""      # the PE group column the field is a member of

    @property
    def reads(self) -> str:
        return f"{self.length} {self.format}"


def widen_plan(event: LifecycleEvent, layout: RecordLayout) -> WidenPlan | None:
    """None when the changed field is not in the layout (nothing to do but record)."""
    change = field_change(event.detail)
    spec, group = _find(layout, change.name)
    if spec is None:
        return None
    column = group.column if group is not None else spec.column
    old = column_types(layout)[column]
    common = {"covered": covers(layout, change), "length": spec.length, "format": spec.format,
              "group": group.column if group is not None else ""}
    fmt = change.format or spec.format
    try:
        wider = replace(spec, length=change.length or spec.length, format=fmt,
                        scale=spec.scale if fmt in "PU" else 0)
        new = column_types(_with_field(layout, spec, wider))[column]
    except LayoutError as exc:  # e.g. a length the format cannot have
        return WidenPlan(column, old, None, str(exc), **common)
    return WidenPlan(column, old, new, **common)


def _with_field(layout: RecordLayout, old: FieldSpec, new: FieldSpec) -> RecordLayout:
    items: list[Any] = []
    for item in layout.items:
        if isinstance(item, GroupSpec) and old in item.members:
            item = replace(item, members=tuple(new if m is old else m for m in item.members))
        items.append(new if item is old else item)
    return RecordLayout(tuple(items), layout.key, layout.source)


@dataclass(frozen=True, slots=True)
class WidenDecision:
    """What a changed field length/format does to one layout's tables: the ``result`` to
    record, the stale kind it leaves (``layout``) and the columns to widen (column → type)."""

    result: str
    stale: str | None = None
    widen: Mapping[str, str] = field(default_factory=dict)


def widen_decision(event: LifecycleEvent, layout: RecordLayout | None,
                   have: Mapping[str, str] | None = None, *, source: str = "conf",
                   ) -> WidenDecision:
    """A changed field length/format against the layout that decodes the file's new images
    (conf format buffer, or the newest GFFT version: ``source`` ``gfft``) and the types the
    tables ``have`` (value column → type; None: as the layout reads them).

    * The layout already reads the field at its new length/format: the tables take the
      layout's type, widened in place when it is wider than theirs; the file stays active.
    * It does not: the file is stale (kind ``layout``: values may be cut or refused) until a
      layout that reads it — the format buffer changed and the job restarted, or a newer
      GFFT version — clears it (``pipeline.spark.typed.reconcile``); the result says whether the
      tables can then widen in place or the field needs a new column.
    """
    change = field_change(event.detail)
    if layout is None:
        return WidenDecision(f"recorded: no layout for this file yet ({change})")
    plan = widen_plan(event, layout)
    if plan is None:
        return WidenDecision(f"recorded: field {change.name!r} is not in the layout")
    table = normal_type((have or {}).get(plan.column) or plan.old_type)
    what = (f"{change.name} (member of the PE group column {plan.group})" if plan.group
            else change.name)
    if plan.covered:
        if widen_steps(table, plan.old_type):
            return WidenDecision(f"widened {plan.column} {table} -> {plan.old_type}: the layout "
                                 f"already reads {what} as {plan.reads}",
                                 widen={plan.column: plan.old_type})
        return WidenDecision(f"no change: the layout already reads {what} as {plan.reads} "
                             f"({plan.column} stays {table})")
    if plan.new_type is None:
        return WidenDecision(f"not applied: {plan.problem}", "layout")
    how = ("a GFFT version that reads it clears this" if source == "gfft" else
           "change the format buffer and restart the job")
    then = {"widen": f"the tables widen {plan.column} to {plan.new_type} with it",
            "same": f"{plan.column} stays {table}",
            "incompatible": f"{plan.column} {table} cannot become {plan.new_type} in place: "
                            f"map {change.name} to a new column"}[widening(table, plan.new_type)]
    now = f"{change.length or plan.length} {change.format or plan.format}"
    return WidenDecision(f"layout review: {what} is now {now}, the layout reads {plan.reads}; "
                         f"{how} ({then})", "layout")


# ------------------------------------------------------------------------- file status
@dataclass(frozen=True, slots=True)
class FileStatus:
    """A file's status as ``file_status`` shows it; ``version`` counts its transitions."""

    dbid: int
    fnr: int
    status: FileState = FileState.ACTIVE
    stale_kinds: tuple[str, ...] = ()
    reason: str = ""
    since: datetime | None = None
    file_name: str = ""
    version: int = 0
    truncated_before: datetime | None = None  # rows older than this left with a truncate


def transition(prev: FileStatus, event: LifecycleEvent, *, extra_stale: str | None = None,
               ) -> FileStatus:
    """The file's status after ``event``; ``extra_stale`` marks it stale for a reason the
    applier found (``layout``: a type change the tables cannot take).

    Dropped wins over stale; a truncate (refresh or define) leaves a known, empty file: active.
    ``since`` moves only when the status word changes. ``truncated_before`` keeps the latest
    truncate's cutoff: a change older than it arriving later (a resend, a late destination)
    belongs to the file as it was before the refresh.
    """
    kinds = set(prev.stale_kinds)
    dropped = prev.status is FileState.DROPPED
    name = prev.file_name
    if event.action is Action.TRUNCATE:
        kinds, dropped = set(), False
    elif event.action is Action.MARK_DROPPED:
        dropped = True
    elif event.action is Action.MARK_STALE and event.stale_kind:
        kinds.add(event.stale_kind)
    elif event.action is Action.CLEAR_STALE and event.stale_kind:
        kinds.discard(event.stale_kind)
    elif event.action is Action.RENAME:
        name = str(event.detail.get("filename") or name)
    if extra_stale:
        kinds.add(extra_stale)
    status = (FileState.DROPPED if dropped else FileState.STALE if kinds else FileState.ACTIVE)
    reason = event.reason if extra_stale is None else _WHY_STALE.get(extra_stale, extra_stale)
    if status is FileState.STALE and event.action is Action.CLEAR_STALE:
        reason = "; ".join(_WHY_STALE.get(k, k) for k in sorted(kinds))
    since = prev.since if status is prev.status and prev.version else event.at
    cut = prev.truncated_before
    if event.action is Action.TRUNCATE and event.at is not None:
        cut = event.at if cut is None else max(cut, event.at)
    return FileStatus(prev.dbid, prev.fnr, status, tuple(sorted(kinds)), reason, since, name,
                      prev.version + 1, cut)


def replay(statuses: Mapping[tuple[int, int], FileStatus],
           steps: Iterable[tuple[LifecycleEvent, tuple[int, int], str | None]],
           ) -> list[FileStatus]:
    """Apply (event, file, extra stale kind) steps in order; every intermediate status."""
    current = dict(statuses)
    out: list[FileStatus] = []
    for event, key, extra in steps:
        prev = current.get(key) or FileStatus(*key)
        current[key] = transition(prev, event, extra_stale=extra)
        out.append(current[key])
    return out


def layout_covered(dbid: int, fnr: int, changes: Sequence[FieldChange], *, st: str,
                   event_id: str, at: datetime | None, received_at: datetime | None = None,
                   ) -> LifecycleEvent:
    """The event that clears a file's ``layout`` stale kind: its layouts now read every field
    AUTI changed (``st``: ``CONF`` at start, ``GFFT`` when a version arrives)."""
    what = ", ".join(f"{c.name} as {' '.join(str(x) for x in (c.length, c.format) if x)}"
                     for c in changes)
    reason = (f"the layout now reads {what}" if changes
              else "the layout reads every field change reported")
    return LifecycleEvent(event_id, "", "", st, dbid, (fnr,), Action.CLEAR_STALE, reason, at,
                          stale_kind="layout", received_at=received_at)
