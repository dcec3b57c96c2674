"""The consistency watermark's rule without Spark (pipeline/spark/land/watermark_rule.py): it
stops before an open gap, moves past it when the gap fills or is given up, never passes a
transaction that has not landed (a property over random losses and refills), and applying a
batch twice (a replay after a crash) changes nothing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.spark.land.watermark_rule import GapSeen, KeyMark, advance, last_transitions


def test_it_stops_before_a_gap_and_moves_past_it_when_the_gap_fills() -> None:
    mark = advance(KeyMark(), [10, 20], [])
    assert mark.watermark == 20
    # tsnr 3 is lost: a gap opens while 4 and 5 land (committed at 40, 50)
    mark = advance(mark, [40, 50], [GapSeen("1:3", "open")])
    assert mark.watermark == 20 and mark.held_by == "1:3" and mark.landed_max == 50
    mark = advance(mark, [60], [GapSeen("1:3", "requested")])
    assert mark.watermark == 20, "a requested gap still holds it"
    mark = advance(mark, [30], [GapSeen("1:3", "filled")])
    assert mark.watermark == 60 and mark.held_by is None


def test_the_oldest_gap_holds_and_a_given_up_gap_releases() -> None:
    mark = advance(KeyMark(landed_max=20), [40], [GapSeen("1:3", "open")])
    mark = advance(mark, [80], [GapSeen("1:6", "open")])
    assert mark.gaps == {"1:3": 20, "1:6": 40} and mark.watermark == 20
    mark = advance(mark, [], [GapSeen("1:3", "unrecoverable")])
    assert mark.watermark == 40, "given up (operators alerted): the next gap holds"
    mark = advance(mark, [], [GapSeen("1:6", "filled")])
    assert mark.watermark == 80


def test_unknown_floors_holes_in_message_numbers_and_replays() -> None:
    assert KeyMark(landed_max=50, gaps={"1:3": None}).watermark is None
    mark = advance(KeyMark(landed_max=50), [60], [GapSeen("m:7", "lost", kind="messages")])
    assert mark.watermark == 60, "a hole in URBHMSNR holds nothing by itself"
    before = KeyMark(landed_max=20)
    batch = ([40, 50], [GapSeen("1:3", "open")])
    once = advance(before, *batch)
    assert advance(once, *batch) == once, "a replayed batch moves nothing"


def test_last_transitions_take_each_gaps_greatest_seq() -> None:
    rows = [{"destination": "OUT1", "subscription": "COLOR", "gap_id": "1:3", "state": "open",
             "kind": "tsnr", "seq": 4},
            {"destination": "OUT1", "subscription": "COLOR", "gap_id": "1:3",
             "state": "requested", "kind": "tsnr", "seq": 5},
            {"destination": "OUT1", "subscription": "EMPL", "gap_id": "2:9", "state": "open",
             "kind": "tsnr", "seq": 1}]
    assert last_transitions(rows) == {("OUT1", "COLOR"): [GapSeen("1:3", "requested")],
                                      ("OUT1", "EMPL"): [GapSeen("2:9", "open")]}


@st.composite
def deliveries(draw: st.DrawFn) -> list[list[int]]:
    """Transactions 1..n (committed at 10·tsnr) in batches, each a list of tsnrs; some come
    late (after later ones: a gap until they land)."""
    n = draw(st.integers(1, 30))
    order = list(range(1, n + 1))
    late = draw(st.sets(st.sampled_from(order), max_size=n // 2))
    on_time = [t for t in order if t not in late]
    stream = on_time + draw(st.permutations(sorted(late)))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=6)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]


def _gap_rows(landed: set[int], opened: set[int]) -> list[GapSeen]:
    """What the state machine reports: a gap per missing tsnr below the newest landed."""
    top = max(landed, default=0)
    missing = {t for t in range(1, top) if t not in landed}
    rows = [GapSeen(f"1:{t}", "open") for t in sorted(missing - opened)]
    rows += [GapSeen(f"1:{t}", "filled") for t in sorted(opened - missing)]
    opened.clear()
    opened.update(missing)
    return rows


@given(deliveries())
@settings(max_examples=200, deadline=None)
def test_the_watermark_never_passes_a_transaction_that_has_not_landed(
        batches: list[list[int]]) -> None:
    mark, landed, opened = KeyMark(), set(), set()
    for batch in batches:
        landed |= set(batch)
        mark = advance(mark, [10 * t for t in batch], _gap_rows(landed, opened))
        n = max(t for b in batches for t in b)
        waiting = [10 * t for t in range(1, n + 1) if t not in landed]
        if mark.watermark is not None and waiting:
            assert mark.watermark < min(waiting)
    assert mark.watermark == 10 * max(landed), "everything landed: the newest commit"
