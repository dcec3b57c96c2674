"""Lifecycle events from real URBS bytes: encoded by the codec, decoded, landed as a
``status_events`` row by the state machine's tables, then interpreted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.payload import layout_from_conf
from pipeline.reassembly.events import StatusReceived
from pipeline.reassembly.tables import events_to_rows
from pipeline.typed.lifecycle import (
    LIFECYCLE_STATUSES,
    Action,
    FieldChange,
    FileState,
    FileStatus,
    LifecycleEvent,
    Target,
    covers,
    decode_urbsu,
    files_of,
    interpret,
    layout_covered,
    pending_changes,
    replay,
    targets,
    transition,
    uncovered,
    widen_decision,
    widen_plan,
    widening,
)
from pipeline.typed.widening import widen_steps
from pipeline.urb import datetime_to_stck, decode_message, encode_message, make_element

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
FORMS = [(True, True), (False, False), (False, True)]  # (ebcdic, big endian)
EMPLOYEE = {"format_buffer": "AA,8,A,AH,4,P,AS,5,P,2,AT,2,B,AU,2,U,AO,30,A.", "dbid": 10006,
            "fnr": 11, "columns": {"AA": "personnel_id", "AH": "birth", "AS": "salary",
                                   "AT": "bonus", "AU": "grade", "AO": "department"}}


def status_row(st_: str, *, ebcdic: bool = True, big: bool = True, fnr: int = 4,
               dbid: int = 10006, sub: str = "COLOR", rsp: int = 0,
               detail: dict | None = None, files: list[int] | None = None,
               commit: datetime | None = T0, landed_order: bool = True) -> dict:
    """One status as the ``status_events`` table holds it, from encoded bytes (with the
    message's byte order, as the job lands it; ``landed_order=False``: a row from before)."""
    extra: dict = {}
    if detail is not None:
        extra["detail"] = make_element("URBSU", **detail)
    if files is not None:
        extra["files"] = files
    urbs = make_element("URBS", urbsst=st_, urbsdbid=dbid, urbsfnr=fnr, urbssnam=sub,
                        urbsrsp=rsp, urbstime=datetime_to_stck(T0),
                        urbsttim=datetime_to_stck(commit) if commit else 0, **extra)
    el = decode_message(encode_message(None, [urbs], ebcdic=ebcdic, big_endian=big)).elements[0]
    event = StatusReceived(subscription=sub, destination="OUT1", epoch=1, fields=el.fields,
                           data=el.data or None, topic="t", partition=0, offset=7, elem_index=0,
                           urbhtime=0, at_ms=1_700_000_000_000,
                           big_endian=big if landed_order else None)
    return events_to_rows([event], 0)["status_events"][0]


def auti(typ: int, form: tuple[bool, bool] = (True, True), **detail: object) -> LifecycleEvent:
    event = interpret(status_row("AUTI", ebcdic=form[0], big=form[1],
                                 detail={"urbsutyp": typ, **detail}))
    assert event is not None
    return event


# ------------------------------------------------------------------ interpretation
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("typ", "action"), [
    (0x48, Action.TRUNCATE), (0x57, Action.TRUNCATE), (0x44, Action.MARK_DROPPED),
    (0x4B, Action.RENAME), (0x59, Action.ADD_COLUMNS), (0x58, Action.ADD_COLUMNS),
    (0x41, Action.WIDEN), (0x5C, Action.WIDEN), (0x4A, Action.RECORD),
    (0x55, Action.RECORD), (0x70, Action.RECORD)])
def test_auti_utility_types_map_to_their_action(form, typ, action) -> None:
    event = auti(typ, form)
    assert event.action is action
    assert event.utility_type == typ and event.files == (4,) and event.dbid == 10006
    assert event.at == T0, "the cutoff is URBSTTIM, the utility's commit time"
    assert event.received_at == datetime.fromtimestamp(1_700_000_000, UTC), "landing time"


@pytest.mark.parametrize("form", FORMS)
def test_auti_detail_is_decoded_in_every_form(form) -> None:
    assert auti(0x41, form, fieldname="AB", newlength=300).detail == {
        "fieldname": "AB", "newlength": 300}
    assert auti(0x4B, form, filename="PERSONNEL").detail == {"filename": "PERSONNEL"}
    assert auti(0x44, form, status="S", anchor=9).detail == {"status": "S", "anchor": 9}
    assert auti(0x5C, form, fieldname="AH", newformat="U").detail["newformat"] == "U"


@pytest.mark.parametrize(("st_", "action", "kind"), [
    ("LODS", Action.MARK_STALE, "load"), ("LODE", Action.CLEAR_STALE, "load"),
    ("UPDS", Action.MARK_STALE, "update"), ("UPDE", Action.CLEAR_STALE, "update"),
    ("SAVS", Action.MARK_STALE, "restore"), ("SAVE", Action.MARK_STALE, "restore"),
    ("RESS", Action.MARK_STALE, "regenerate"), ("RESE", Action.MARK_STALE, "regenerate"),
    ("LOST", Action.MARK_STALE, "lost"), ("DEAC", Action.MARK_STALE, "deactivated"),
    ("REAC", Action.RECORD, None), ("REFR", Action.RECORD, None)])
def test_file_statuses(st_, action, kind) -> None:
    event = interpret(status_row(st_))
    assert event is not None and (event.action, event.stale_kind) == (action, kind)


def test_a_load_that_ends_with_an_error_leaves_the_file_stale() -> None:
    event = interpret(status_row("LODE", rsp=131))
    assert event is not None and event.action is Action.MARK_STALE
    assert "response 131" in event.reason


@pytest.mark.parametrize(("ebcdic", "big"), FORMS)
def test_replay_file_list_comes_from_urbsdata(ebcdic, big) -> None:
    event = interpret(status_row("RPLS", ebcdic=ebcdic, big=big, fnr=0, files=[4, 11]),
                      big_endian=True if ebcdic else None)
    assert event is not None and event.files == (4, 11) and event.stale_kind == "replay"


@pytest.mark.parametrize(("ebcdic", "big"), FORMS)
def test_byte_order_comes_from_the_message_not_a_guess(ebcdic, big) -> None:
    """Files 256 and 512 read the other way round are 1 and 2, the smaller reading the old
    inference chose; a URBSU length of 256 likewise. The landed URBHBORD decides."""
    rpls = interpret(status_row("RPLS", ebcdic=ebcdic, big=big, fnr=0, files=[256, 512]))
    assert rpls is not None and rpls.files == (256, 512)
    event = auti(0x41, (ebcdic, big), fieldname="AB", newlength=256)
    assert event.detail["newlength"] == 256
    # a row landed before the column existed (no order): the conf hint, then the inference
    old = status_row("RPLS", ebcdic=ebcdic, big=big, fnr=0, files=[4, 11], landed_order=False)
    assert old["big_endian"] is None
    assert interpret(old, big_endian=big).files == (4, 11)  # type: ignore[union-attr]


@pytest.mark.parametrize("st_", ["STRT", "TERM", "SUBS", "C5DA", "INIT", "CMPL", "TRSP"])
def test_statuses_about_no_file_are_not_lifecycle_events(st_) -> None:
    assert st_ not in LIFECYCLE_STATUSES
    assert interpret(status_row(st_)) is None


def test_auti_without_detail_is_recorded_not_guessed() -> None:
    event = interpret(status_row("AUTI"))
    assert event is not None and event.action is Action.RECORD
    assert decode_urbsu(b"not a urbsu at all, 32 bytes long!") is None


def test_same_status_on_two_destinations_has_two_ids() -> None:
    row = status_row("LODS")
    other = {**row, "destination": "OUT2"}
    assert interpret(row).event_id != interpret(other).event_id  # type: ignore[union-attr]


@given(typ=st.sampled_from([0x41, 0x68, 0x69, 0x78]), value=st.integers(1, 65535),
       form=st.sampled_from(FORMS))
def test_numeric_details_round_trip_in_both_byte_orders(typ, value, form) -> None:
    name = {0x41: "newlength", 0x68: "userisn", 0x69: "mixdsdev", 0x78: "mupex"}[typ]
    detail = {name: value, **({"fieldname": "AB"} if typ == 0x41 else {})}
    assert auti(typ, form, **detail).detail[name] == value


# ------------------------------------------------------------------ targets
LAYOUTS = [Target("COLOR", 10006, 4), Target("EMPLOYEE", 10006, 11), Target("ORDERS", 12, 4)]


def test_targets_match_database_file_and_subscription() -> None:
    event = interpret(status_row("AUTI", sub="", detail={"urbsutyp": 0x48}))
    assert event is not None
    assert [t.suffix for t in targets(event, LAYOUTS)] == ["color_4"]
    lost = interpret(status_row("LOST", fnr=0, sub="EMPLOYEE"))
    assert lost is not None
    assert [t.suffix for t in targets(lost, LAYOUTS)] == ["employee_11"]
    assert files_of(lost, LAYOUTS) == [(10006, 11)]


# ------------------------------------------------------------------ widening
LAYOUT = layout_from_conf(EMPLOYEE)


def test_widen_plan_for_packed_binary_and_alpha_fields() -> None:
    def plan(**detail: object):
        event = auti(0x41 if "newlength" in detail else 0x5C, **detail)
        return widen_plan(event, LAYOUT)

    salary = plan(fieldname="AS", newlength=7)
    assert (salary.column, salary.old_type, salary.new_type, salary.covered) == (
        "salary", "decimal(9,2)", "decimal(13,2)", False)
    assert widening(salary.old_type, salary.new_type) == "widen"
    bonus = plan(fieldname="AT", newlength=4)
    assert (bonus.old_type, bonus.new_type) == ("int", "bigint")
    name = plan(fieldname="AA", newlength=40)
    assert widening(name.old_type, name.new_type) == "same", "strings have no length"
    fmt = plan(fieldname="AA", newformat="P")
    assert fmt.new_type == "decimal(15,0)" and widening(fmt.old_type, fmt.new_type) == \
        "incompatible"
    assert plan(fieldname="ZZ", newlength=9) is None, "a field outside the layout"
    bad = plan(fieldname="AH", newlength=20)
    assert bad.new_type is None and "length 20" in bad.problem, "P holds at most 15 bytes"
    assert plan(fieldname="AS", newlength=4).covered, "shorter than the layout reads"


def test_a_longer_field_makes_the_file_stale_until_the_layout_changes() -> None:
    decision = widen_decision(auti(0x41, fieldname="AS", newlength=7), LAYOUT)
    assert decision.stale == "layout" and not decision.widen
    assert "AS is now 7 P, the layout reads 5 P" in decision.result
    assert "change the format buffer and restart the job" in decision.result
    assert "the tables widen salary to decimal(13,2) with it" in decision.result
    gfft = widen_decision(auti(0x41, fieldname="AS", newlength=7), LAYOUT, source="gfft")
    assert "a GFFT version that reads it clears this" in gfft.result
    decision = widen_decision(auti(0x41, fieldname="AA", newlength=40), LAYOUT)
    assert decision.stale == "layout", "alpha values longer than the layout's 8 bytes get cut"
    decision = widen_decision(auti(0x5C, fieldname="AA", newformat="P"), LAYOUT)
    assert decision.stale == "layout"
    assert "personnel_id string cannot become decimal(15,0) in place: map AA to a new column" \
        in decision.result
    decision = widen_decision(auti(0x41, fieldname="AH", newlength=20), LAYOUT)
    assert decision.stale == "layout" and decision.result.startswith("not applied: AH: length")


def test_a_change_the_layout_already_reads_widens_the_tables_and_keeps_the_file_active(
        ) -> None:
    """The format buffer was changed ahead of the utility (P5 → P7 read as 7 bytes), the
    tables still hold the old type: they widen with the event, no stale kind."""
    wider = layout_from_conf({**EMPLOYEE, "format_buffer": EMPLOYEE["format_buffer"].replace(
        "AS,5,P,2", "AS,7,P,2")})
    have = {"salary": "decimal(9,2)", "birth": "decimal(7,0)"}
    decision = widen_decision(auti(0x41, fieldname="AS", newlength=7), wider, have)
    assert (decision.stale, dict(decision.widen)) == (None, {"salary": "decimal(13,2)"})
    assert decision.result == ("widened salary decimal(9,2) -> decimal(13,2): the layout "
                               "already reads AS as 7 P")
    done = widen_decision(auti(0x41, fieldname="AS", newlength=7), wider,
                          {"salary": "decimal(13,2)"})
    assert (done.stale, dict(done.widen)) == (None, {})
    assert done.result == ("no change: the layout already reads AS as 7 P (salary stays "
                           "decimal(13,2))")


def test_a_pe_member_change_widens_the_group_column_in_place() -> None:
    conf = {"format_buffer": "AA,8,A,GA1-2.", "groups": {"GA": "AR,3,A,AS,4,P"}, "dbid": 1,
            "fnr": 2}
    layout = layout_from_conf(conf)
    decision = widen_decision(auti(0x41, fieldname="AS", newlength=6), layout)
    assert decision.stale == "layout"
    assert "AS (member of the PE group column ga) is now 6 P" in decision.result
    assert "widen ga to array<struct<ar:string,as:decimal(11,0)>>" in decision.result
    wider = layout_from_conf({**conf, "groups": {"GA": "AR,3,A,AS,6,P"}})
    decision = widen_decision(auti(0x41, fieldname="AS", newlength=6), wider,
                              {"ga": "array<struct<ar:string,as:decimal(7,0)>>"})
    assert dict(decision.widen) == {"ga": "array<struct<ar:string,as:decimal(11,0)>>"}
    assert widen_steps("array<struct<ar:string,as:decimal(7,0)>>",
                       decision.widen["ga"]) == [(("element", "as"), "decimal(11,0)")]


def test_a_field_change_the_layout_already_covers_is_recorded_only() -> None:
    assert widen_decision(auti(0x41, fieldname="AA", newlength=6), LAYOUT).result == (
        "no change: the layout already reads AA as 8 A (personnel_id stays string)")
    decision = widen_decision(auti(0x41, fieldname="ZZ", newlength=6), LAYOUT)
    assert decision.stale is None and "not in the layout" in decision.result
    decision = widen_decision(auti(0x41, fieldname="AS", newlength=7), None)
    assert decision.stale is None and decision.result.startswith("recorded: no layout")


def test_pending_changes_fold_per_field_in_time_order() -> None:
    changes = [(3, FieldChange("AS", None, "U")), (1, FieldChange("AS", 6)),
               (2, FieldChange("AS", 7)), (1, FieldChange("AT", 4))]
    pending = pending_changes(changes)
    assert pending == {"AS": FieldChange("AS", 7, "U"), "AT": FieldChange("AT", 4)}
    assert [str(c) for c in uncovered(LAYOUT, pending)] == ["AS 7 U", "AT 4"]
    wider = layout_from_conf({**EMPLOYEE, "format_buffer": "AS,7,U,2,AT,4,B."})
    assert uncovered(wider, pending) == []
    assert covers(LAYOUT, FieldChange("ZZ", 99)), "a field the layout does not read"
    assert not covers(LAYOUT, FieldChange("AS", None, "U")), "P read, now U"


def test_the_layout_kind_clears_once_covered_and_keeps_other_kinds() -> None:
    stale = replay({}, [(_event(Action.MARK_STALE, "lost"), (10006, 4), None),
                        (_event(Action.WIDEN, minutes=1), (10006, 4), "layout")])[-1]
    assert stale.stale_kinds == ("layout", "lost")
    clear = layout_covered(10006, 4, [FieldChange("AS", 7)], st="CONF", event_id="x",
                           at=T0 + timedelta(minutes=2))
    assert (clear.action, clear.stale_kind, clear.files) == (Action.CLEAR_STALE, "layout", (4,))
    assert clear.reason == "the layout now reads AS as 7"
    after = transition(stale, clear)
    assert (after.status, after.stale_kinds) == (FileState.STALE, ("lost",))
    only = transition(transition(FileStatus(10006, 4), _event(Action.WIDEN), extra_stale="layout"),
                      clear)
    assert (only.status, only.stale_kinds, only.reason, only.version) == (
        FileState.ACTIVE, (), "the layout now reads AS as 7", 2)
    assert only.since == T0 + timedelta(minutes=2)


@pytest.mark.parametrize(("old", "new", "verdict"), [
    ("int", "bigint", "widen"), ("bigint", "int", "incompatible"),
    ("decimal(7,2)", "decimal(9,2)", "widen"), ("decimal(9,2)", "decimal(7,2)", "incompatible"),
    ("decimal(9,2)", "decimal(9,3)", "incompatible"), ("decimal(7,2)", "decimal(9,3)", "widen"),
    ("decimal(9,2)", "decimal(10,4)", "incompatible"), ("int", "decimal(12,2)", "widen"),
    ("int", "decimal(10,0)", "widen"), ("int", "decimal(9,0)", "incompatible"),
    ("smallint", "decimal(6,0)", "incompatible"), ("bigint", "decimal(20,0)", "widen"),
    ("bigint", "decimal(21,2)", "incompatible"), ("int", "double", "widen"),
    ("bigint", "double", "incompatible"), ("decimal(7,2)", "double", "incompatible"),
    ("string", "decimal(9,0)", "incompatible"), ("decimal(7,0)", "string", "incompatible"),
    ("string", "string", "same"), ("array<int>", "array<bigint>", "widen"),
    ("array<bigint>", "array<int>", "incompatible"), ("int", "array<int>", "incompatible"),
    ("array<struct<x:int,y:decimal(7,2)>>", "array<struct<x:int,y:decimal(11,2)>>", "widen"),
    ("array<struct<x:int>>", "array<struct<x:int,y:int>>", "incompatible"),
    ("Decimal(7, 2)", "decimal(7,2)", "same")])
def test_widening_verdicts(old, new, verdict) -> None:
    """What delta-spark 4.4.0 does with ALTER COLUMN TYPE (pipeline/typed/widening.py)."""
    assert widening(old, new) == verdict


TYPES = st.sampled_from(["int", "bigint", "string", "double", "decimal(5,0)", "decimal(9,2)",
                         "decimal(13,2)", "decimal(20,0)", "array<int>", "array<bigint>"])


@given(TYPES, TYPES)
def test_widening_never_goes_both_ways(a, b) -> None:
    assert not (widening(a, b) == "widen" and widening(b, a) == "widen")
    assert (widening(a, b) == "same") == (a == b)


# ------------------------------------------------------------------ file status
def _event(action: Action, kind: str | None = None, minutes: int = 0, **detail) -> LifecycleEvent:
    return LifecycleEvent("id", "COLOR", "OUT1", "X", 10006, (4,), action, f"{action}",
                          T0 + timedelta(minutes=minutes), stale_kind=kind, detail=detail)


def test_load_marks_stale_then_its_clean_end_clears_it() -> None:
    s0 = FileStatus(10006, 4)
    s1 = transition(s0, _event(Action.MARK_STALE, "load", 1))
    s2 = transition(s1, _event(Action.CLEAR_STALE, "load", 2))
    assert (s1.status, s1.stale_kinds) == (FileState.STALE, ("load",))
    assert s1.since == T0 + timedelta(minutes=1)
    assert (s2.status, s2.stale_kinds, s2.version) == (FileState.ACTIVE, (), 2)
    assert s2.since == T0 + timedelta(minutes=2)


def test_clearing_one_kind_keeps_the_others() -> None:
    s = replay({}, [(_event(Action.MARK_STALE, "lost"), (10006, 4), None),
                    (_event(Action.MARK_STALE, "load"), (10006, 4), None),
                    (_event(Action.CLEAR_STALE, "load"), (10006, 4), None)])[-1]
    assert (s.status, s.stale_kinds) == (FileState.STALE, ("lost",))
    assert "LOST" in s.reason


def test_drop_rename_and_define_again() -> None:
    steps = [(_event(Action.RENAME, filename="PERSONNEL"), (10006, 4), None),
             (_event(Action.MARK_DROPPED, minutes=1), (10006, 4), None),
             (_event(Action.MARK_STALE, "lost", 2), (10006, 4), None),
             (_event(Action.TRUNCATE, minutes=3), (10006, 4), None)]
    renamed, dropped, still, defined = replay({}, steps)
    assert renamed.file_name == "PERSONNEL" and renamed.status is FileState.ACTIVE
    assert dropped.status is FileState.DROPPED and still.status is FileState.DROPPED
    assert still.since == dropped.since, "since moves only when the status changes"
    assert defined.status is FileState.ACTIVE and defined.file_name == "PERSONNEL"
    assert renamed.truncated_before is None
    assert defined.truncated_before == T0 + timedelta(minutes=3)


def test_a_type_change_the_table_cannot_take_makes_it_stale() -> None:
    s = transition(FileStatus(10006, 4), _event(Action.WIDEN), extra_stale="layout")
    assert s.status is FileState.STALE and s.stale_kinds == ("layout",)
    assert "layout" in s.reason


STEP = st.sampled_from([
    (Action.MARK_STALE, "load"), (Action.CLEAR_STALE, "load"), (Action.MARK_STALE, "lost"),
    (Action.TRUNCATE, None), (Action.MARK_DROPPED, None), (Action.RECORD, None),
    (Action.ADD_COLUMNS, None)])


@given(st.lists(STEP, max_size=30))
def test_file_status_model(steps) -> None:
    """Against a naive model: dropped since the last drop unless truncated after it; stale
    kinds as a set; the status word follows from both; versions count every step."""
    events = [(_event(a, k, minutes=i), (10006, 4), None) for i, (a, k) in enumerate(steps)]
    out = replay({}, events)
    dropped, kinds = False, set()
    for (action, kind), status in zip(steps, out, strict=True):
        if action is Action.TRUNCATE:
            dropped, kinds = False, set()
        elif action is Action.MARK_DROPPED:
            dropped = True
        elif action is Action.MARK_STALE:
            kinds.add(kind)
        elif action is Action.CLEAR_STALE:
            kinds.discard(kind)
        expect = FileState.DROPPED if dropped else FileState.STALE if kinds else FileState.ACTIVE
        assert (status.status, set(status.stale_kinds)) == (expect, kinds)
    assert [s.version for s in out] == list(range(1, len(steps) + 1))


URBSU_LIKE = st.one_of(
    st.binary(max_size=80),
    st.tuples(st.sampled_from([b"URBSU ", "URBSU ".encode("cp037")]), st.binary(max_size=60))
    .map(b"".join))


@given(st_=st.sampled_from(sorted(LIFECYCLE_STATUSES)), data=URBSU_LIKE,
       fnr=st.integers(0, 65535), rsp=st.integers(0, 255))
def test_any_urbsdata_gives_an_event_never_an_exception(st_, data, fnr, rsp) -> None:
    """Bad input is recorded, never a crash of the job: garbage after an AUTI is 'recorded'."""
    row = {"st": st_, "data": data, "fnr": fnr, "dbid": 10006, "rsp": rsp,
           "subscription": "COLOR", "destination": "OUT1", "time": T0}
    event = interpret(row)
    assert event is not None and event.st == st_
    if st_ == "AUTI" and not data.startswith((b"URBSU", "URBSU".encode("cp037"))):
        assert event.action is Action.RECORD
    for kind in {event.stale_kind} - {None}:
        assert transition(FileStatus(10006, 4), event).stale_kinds in ((), (kind,))
