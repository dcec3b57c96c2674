"""The consistency watermark's rule without Spark (pipeline/spark/land/watermark_rule.py): per
database, on that database's clock; it stops before an open gap and moves past it when the gap
fills or is given up; a cluster's nucleus lag is taken off; a replayed batch changes nothing;
and, as a property over two databases whose clocks disagree with nuclei delivering late,
random losses and refills, it never passes a transaction that has not landed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly.sequence import RING
from pipeline.spark.land.watermark_rule import (
    PREFIX,
    GapSeen,
    KeyMark,
    advance,
    call_newest,
    last_transitions,
    prefix_newest,
)

A, B = 10006, 10007


def _land(mark: KeyMark, landed: list[tuple[int, int, int]], gaps_after: list[int],
          seen: list[GapSeen], lag: int = 0) -> KeyMark:
    """One batch of epoch 1: ``landed`` (tsnr, dbid, commit), the open gaps' first tsnrs after
    it, the gaps' transitions."""
    report = call_newest({}, [(1, t, d, c) for t, d, c in landed],
                         [(1, g, f"1:{g}") for g in gaps_after])
    return advance(mark, report, seen, lag)


def test_it_stops_before_a_gap_and_moves_past_it_when_the_gap_fills() -> None:
    mark = _land(KeyMark(), [(1, A, 10), (2, A, 20)], [], [])
    assert mark.marks == {A: 19}, "every commit up to 19 µs landed (20 may be shared)"
    # tsnr 3 is lost: a gap opens while 4 and 5 land (committed at 40, 50)
    mark = _land(mark, [(4, A, 40), (5, A, 50)], [3], [GapSeen("1:3", "open")])
    assert mark.marks == {A: 19} and mark.held_by == "1:3" and mark.gaps == {"1:3": {A: 50}}
    mark = _land(mark, [(6, A, 60)], [3], [GapSeen("1:3", "requested")])
    assert mark.marks == {A: 19}, "a requested gap still holds it"
    mark = _land(mark, [(3, A, 30)], [], [GapSeen("1:3", "filled")])
    assert mark.marks == {A: 59} and mark.held_by is None and mark.prefix == {A: 60}


def test_each_database_on_its_own_clock_and_the_nucleus_lag() -> None:
    # B's clock runs far behind A's: its watermark is its own, never A's
    mark = _land(KeyMark(), [(1, A, 1_000), (2, B, 400), (3, A, 1_100)], [], [], lag=50)
    assert mark.marks == {A: 1_049, B: 349}
    # a later tsnr may carry an earlier commit (another nucleus, up to the lag late)
    mark = _land(mark, [(4, A, 1_060)], [], [], lag=50)
    assert mark.marks == {A: 1_049, B: 349}, "an earlier commit at a later tsnr moves nothing"
    assert mark.dbids() == [A, B]


def test_the_oldest_gap_holds_and_a_given_up_gap_releases() -> None:
    mark = _land(KeyMark(), [(2, A, 20)], [1], [GapSeen("1:1", "open")])
    assert mark.marks == {} and mark.gaps == {"1:1": {A: 20}}
    mark = _land(mark, [(4, A, 40)], [1, 3], [GapSeen("1:3", "open")])
    assert mark.gaps == {"1:1": {A: 20}, "1:3": {A: 40}} and mark.held_by == "1:1"
    mark = advance(mark, [], [GapSeen("1:1", "unrecoverable")], 0)
    assert mark.marks == {A: 19}, "given up (operators alerted): the next gap holds"
    assert mark.gaps == {"1:3": {A: 40}}
    mark = advance(mark, [], [GapSeen("1:3", "filled")], 0)
    assert mark.marks == {A: 39}, "its bucket joined the prefix"


def test_a_later_gap_ending_first_joins_the_earlier_one() -> None:
    mark = _land(KeyMark(), [(1, A, 10), (3, A, 30), (5, B, 50)], [2, 4],
                 [GapSeen("1:2", "open"), GapSeen("1:4", "open")])
    mark = _land(mark, [(4, A, 40)], [2], [GapSeen("1:4", "filled")])
    assert mark.gaps == {"1:2": {A: 40, B: 50}} and mark.marks == {A: 9}
    mark = _land(mark, [(2, B, 20)], [], [GapSeen("1:2", "filled")])
    assert mark.marks == {A: 39, B: 49}


def test_holes_in_message_numbers_initial_state_and_replays() -> None:
    mark = advance(KeyMark(prefix={A: 50}, marks={A: 49}), [[PREFIX, A, 60]],
                   [GapSeen("msnr:0:7", "lost", kind="messages")], 0)
    assert mark.marks == {A: 59}, "a hole in URBHMSNR holds nothing by itself"
    into: dict[int, int] = {}
    prefix_newest(into, [A, A, B], [10, 90, None], [False, True, False])
    assert into == {A: 10}, "initial state and unset commit times move nothing"
    before = KeyMark(prefix={A: 20}, marks={A: 19})
    batch = (call_newest({}, [(1, 4, A, 40), (1, 5, A, 50)], [(1, 3, "1:3")]),
             [GapSeen("1:3", "open")], 0)
    once = advance(before, *batch)
    assert advance(once, *batch) == once, "a replayed batch moves nothing"


def test_buckets_follow_the_wrap_and_epochs() -> None:
    # a gap just below the wrap: tsnr 2 after it is 4294967297 unwrapped, in its bucket
    start = RING - 1
    report = call_newest({A: 5}, [(3, 2, A, 70), (2, 9, B, 80)], [(3, start, f"3:{start}")])
    assert report == [[PREFIX, A, 5], [PREFIX, B, 80], [f"3:{start}", A, 70]], (
        "an older epoch's transaction (a late fill) is before every gap of the newer one")


def test_last_transitions_take_each_gaps_greatest_seq() -> None:
    rows = [{"destination": "OUT1", "subscription": "COLOR", "gap_id": "1:3", "state": "open",
             "kind": "tsnr", "seq": 4},
            {"destination": "OUT1", "subscription": "COLOR", "gap_id": "1:3",
             "state": "requested", "kind": "tsnr", "seq": 5},
            {"destination": "OUT1", "subscription": "EMPL", "gap_id": "2:9", "state": "open",
             "kind": "tsnr", "seq": 1}]
    assert last_transitions(rows) == {("OUT1", "COLOR"): [GapSeen("1:3", "requested")],
                                      ("OUT1", "EMPL"): [GapSeen("2:9", "open")]}


# -- the property ------------------------------------------------------------------------------

LAG = 20  # µs here: the nucleus lag the conf declares, and the most the stream uses


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Transactions 1..n of databases A and B — received by the replicator at 10·tsnr, each
    committed on its database's clock (B's 300 µs behind A's) up to ``LAG`` before it reached
    the replicator (a cluster's nuclei), so commit times are out of tsnr order — delivered in
    batches, some late (a gap until they land)."""
    n = draw(st.integers(1, 30))
    offsets = {A: 0, B: -300}
    txs = []
    for t in range(1, n + 1):
        dbid = draw(st.sampled_from([A, B]))
        txs.append((dbid, 10 * t + offsets[dbid] - draw(st.integers(0, LAG))))
    order = list(range(1, n + 1))
    late = draw(st.sets(st.sampled_from(order), max_size=n // 2))
    stream = [t for t in order if t not in late] + draw(st.permutations(sorted(late)))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=6)))
    return txs, [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]


class Machine:
    """Gaps as the state machine keeps them: a run of missing tsnrs found at once is one gap
    (its id from its first tsnr), open until every tsnr of it has landed."""

    def __init__(self) -> None:
        self.top = 0
        self.open: dict[int, set[int]] = {}  # first tsnr → tsnrs still missing

    def batch(self, tsnrs: list[int]) -> list[GapSeen]:
        seen = []
        for t in tsnrs:
            if t > self.top + 1:
                self.open[self.top + 1] = set(range(self.top + 1, t))
                seen.append(GapSeen(f"1:{self.top + 1}", "open"))
            self.top = max(self.top, t)
            for start, missing in list(self.open.items()):
                missing.discard(t)
                if not missing:
                    del self.open[start]
                    seen.append(GapSeen(f"1:{start}", "filled"))
        return seen


@given(streams())
@settings(max_examples=300, deadline=None)
def test_the_watermark_never_passes_a_transaction_that_has_not_landed(
        stream: tuple[list[tuple[int, int]], list[list[int]]]) -> None:
    txs, batches = stream
    mark, landed, machine = KeyMark(), set(), Machine()
    for batch in batches:
        landed |= set(batch)
        seen = machine.batch(batch)
        mark = _land(mark, [(t, *txs[t - 1]) for t in batch], sorted(machine.open), seen, LAG)
        for dbid, watermark in mark.marks.items():
            waiting = [c for t, (d, c) in enumerate(txs, 1) if d == dbid and t not in landed]
            assert all(watermark < c for c in waiting), (dbid, watermark, waiting)
    newest = {d: max(c for dd, c in txs if dd == d) for d, _ in txs}
    assert mark.marks == {d: c - LAG - 1 for d, c in newest.items()}, (
        "everything landed: each database's newest commit, less the lag")
