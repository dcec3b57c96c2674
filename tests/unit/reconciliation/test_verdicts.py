"""The reconciliation's verdicts without Spark or Kafka: each verdict, the race (a live change
between the lake's read and the replicator's read is never drift), an ISN deleted meanwhile,
answers and changes in any order, and a corrupted row always found."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reconciliation.verdicts import Answer, LakeState, judge, lake_at

T0 = datetime(2026, 11, 29, 8, 0, 0)
FIELDS = ("name", "color")


def v(seconds: float, tsnr: int = 1, rsnr: int = 1) -> tuple[datetime, int, int, int]:
    return (T0 + timedelta(seconds=seconds), 1, tsnr, rsnr)


def row(seconds: float, **values: object) -> LakeState:
    return LakeState(v(seconds), False, values)


def test_equal_row_matches() -> None:
    got = judge(7, row(1, name="A", color="RED"), (), Answer(7, v(5, 0), True,
                                                             {"name": "A", "color": "RED"}),
                FIELDS, comparable=True)
    assert (got.verdict, got.fields, got.lake_version) == ("match", (), v(1))


def test_changed_value_differs_naming_the_field() -> None:
    got = judge(7, row(1, name="A", color="BLUE"), (), Answer(7, v(5, 0), True,
                                                              {"name": "A", "color": "RED"}),
                FIELDS, comparable=True)
    assert (got.verdict, got.fields, got.is_drift) == ("differs", ("color",), True)


def test_row_gone_from_the_lake_is_missing() -> None:
    answer = Answer(7, v(5, 0), True, {"name": "A", "color": "RED"})
    assert judge(7, None, (), answer, FIELDS, comparable=True).verdict == "missing_in_lake"
    deleted = LakeState(v(1), deleted=True)
    assert judge(7, deleted, (), answer, FIELDS, comparable=True).verdict == "missing_in_lake"


def test_not_found_answer_against_a_live_row_is_extra_and_against_none_a_match() -> None:
    gone = Answer(9, v(5, 0), found=False)
    assert judge(9, row(1, name="X"), (), gone, FIELDS, comparable=True).verdict \
        == "extra_in_lake"
    assert judge(9, None, (), gone, FIELDS, comparable=True).verdict == "match"
    tomb = LakeState(v(1), deleted=True)
    assert judge(9, tomb, (), gone, FIELDS, comparable=True).verdict == "match"


def test_no_answer_or_not_comparable_is_unanswered_never_drift() -> None:
    before = row(1, name="A")
    assert judge(1, before, (), None, FIELDS, comparable=True).verdict == "unanswered"
    answer = Answer(1, v(5, 0), True, {"name": "B"})
    got = judge(1, before, (), answer, FIELDS, comparable=False)
    assert (got.verdict, got.is_drift) == ("unanswered", False)
    assert "landed" in got.reason


def test_lake_row_newer_than_the_read_is_unanswered() -> None:
    got = judge(1, row(9, name="A"), (), Answer(1, v(5, 0), True, {"name": "B"}), FIELDS,
                comparable=True)
    assert (got.verdict, got.reason) == ("unanswered", "lake row newer than the read")


def test_live_change_between_the_reads_is_the_state_compared() -> None:
    """The lake read A at 1; a live update to B committed at 3 landed after; Adabas read B at
    5. Comparing the answer with the row read at 1 would call it different: it is not."""
    got = judge(1, row(1, name="A", color="R"), [row(3, name="B", color="R")],
                Answer(1, v(5, 0), True, {"name": "B", "color": "R"}), FIELDS,
                comparable=True)
    assert got.verdict == "match" and got.lake_version == v(3)


def test_live_change_after_the_read_says_nothing_about_the_answer() -> None:
    """Updated to C at 7, after Adabas read B at 5: the answer is compared with B."""
    got = judge(1, row(1, name="B", color="R"), [row(7, name="C", color="R")],
                Answer(1, v(5, 0), True, {"name": "B", "color": "R"}), FIELDS,
                comparable=True)
    assert got.verdict == "match"


def test_isn_deleted_meanwhile() -> None:
    """Deleted at 3 (landed), read at 5 as response 113: both sides say gone. Deleted at 7,
    after a read at 5 that found the record: the answer is compared with the row."""
    deleted = LakeState(v(3), deleted=True)
    assert judge(1, row(1, name="A"), [deleted], Answer(1, v(5, 0), found=False), FIELDS,
                 comparable=True).verdict == "match"
    late = LakeState(v(7), deleted=True)
    assert judge(1, row(1, name="A"), [late], Answer(1, v(5, 0), True, {"name": "A"}), FIELDS,
                 comparable=True).verdict == "match"


# -- properties ---------------------------------------------------------------------------

values = st.fixed_dictionaries({"name": st.sampled_from(["A", "B", "C"]),
                                "color": st.sampled_from(["RED", "BLUE", None])})
#: A source history of one ISN: at second 1, 2, 3 … an upsert (values) or a delete (None).
histories = st.lists(st.one_of(st.none(), values), min_size=1, max_size=8)


def _state(history: list[dict | None], upto: float) -> LakeState | None:
    """The true state after every change committed at or before ``upto``."""
    out = None
    for i, change in enumerate(history, start=1):
        if i <= upto:
            out = LakeState(v(i), change is None, change or {})
    return out


@settings(max_examples=300, deadline=None)
@given(histories, st.data())
def test_a_faithful_lake_is_never_drift_whatever_lands_in_which_order(history, data) -> None:
    """The lake applied every change up to its read at ``seen``; any subset-in-order of the
    later changes landed after (all those before Adabas's read, any after it), in any order;
    Adabas answered its true state at ``read``: the verdict is ``match``."""
    n = len(history)
    seen = data.draw(st.integers(0, n), label="lake read after change")
    read = data.draw(st.integers(seen, n), label="Adabas read after change") + 0.5
    before = _state(history, seen)
    later = [LakeState(v(i), c is None, c or {}) for i, c in enumerate(history, start=1)
             if i > seen and (i < read or data.draw(st.booleans()))]
    landed = data.draw(st.permutations(later), label="landing order")
    truth = _state(history, read)
    found = truth is not None and not truth.deleted
    answer = Answer(1, (T0 + timedelta(seconds=read), 1, 0, 1), found,
                    truth.values if found and truth else {})
    got = judge(1, before, landed, answer, FIELDS, comparable=True)
    assert got.verdict == "match", (got, before, landed, answer)


@settings(max_examples=200, deadline=None)
@given(histories, st.data())
def test_a_corrupted_row_is_always_found(history, data) -> None:
    """The lake's row was changed by hand (a value no change wrote), nothing landed since, and
    Adabas read the true state: never ``match``."""
    n = len(history)
    truth = _state(history, n)
    assert truth is not None
    before = LakeState(truth.version, False, {"name": "HAND-EDITED", "color": "RED"})
    found = not truth.deleted
    answer = Answer(1, (T0 + timedelta(seconds=n + 1), 1, 0, 1), found,
                    truth.values if found else {})
    got = judge(1, before, (), answer, FIELDS, comparable=True)
    assert got.is_drift and got.verdict == ("differs" if found else "extra_in_lake")


def test_lake_at_takes_the_newest_change_older_than_the_read() -> None:
    got = lake_at(row(1, name="A"), [row(4, name="D"), row(2, name="B"), row(6, name="F")],
                  v(5, 0))
    assert got is not None and got.values == {"name": "D"}
    assert lake_at(None, [row(6, name="F")], v(5, 0)) is None
