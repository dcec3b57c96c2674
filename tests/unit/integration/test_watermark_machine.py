"""The consistency watermark over the real state machine: simulated streams over two databases
whose clocks disagree (10007 50 ms behind) with 10006 a cluster of two nuclei delivering up to
20 ms late (commit times out of tsnr order, issue 35), every transport fault but replicator
restarts, random batch cuts and the simulator answering the job's TRAN requests. Each state
call's report (``state_stage.key_stats``: the newest commit per gap bucket and database) and
the batch's gap rows advance the marks as the ``Watermarks`` step does; after every batch, no
watermark may be at or past the commit time of a transaction of its database that has not
landed (nor been given up: an unrecoverable gap, an operator told), and when the stream is
whole each is its database's newest commit less the lag.

Replicator restarts are left out: transactions a replicator loses in a restart that no later
tsnr of their epoch shows missing are beyond the job's knowledge (the restart alert says so).
Without restarts a tsnr names one transaction of its subscription (no run here is long enough
to wrap onto itself), so a transaction counts as landed by its tsnr alone: a ``corrupt`` fault
that flips a byte inside URBTTTIM lands the transaction with another commit time, and nothing
on the wire (no checksum) lets any reader know."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devtools.sim import FaultPlan
from devtools.sim.faults import KINDS
from pipeline.reassembly.events import TransactionComplete
from pipeline.spark.engine.state_stage import key_stats
from pipeline.spark.land.watermark_rule import KeyMark, advance, last_transitions
from tests.support.harness import BatchOutput, Harness, default_reassembly
from tests.support.scenarios import sim_config, simulate
from tests.support.truth import Sent

LAG_US = 20_000  # the simulator's nucleus_lag_ms for 10006: what the conf would declare
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def _advance(marks: dict[tuple[str, str], KeyMark], out: BatchOutput, h: Harness) -> None:
    """The Watermarks step's arithmetic for one harness batch: each call's metrics row, then
    the batch's last gap transitions per key."""
    gaps = last_transitions([{**r, "seq": i} for i, r in enumerate(out.tables["gaps"])])
    for key in out.calls:
        events = [e for e in out.events if isinstance(e, TransactionComplete)
                  and (e.destination, e.subscription) == key]
        stats = key_stats(key, [], h.state(key), events, h.config.tod_offset_us)
        marks[key] = advance(marks.get(key, KeyMark()), stats["newest"], gaps.get(key, ()),
                             LAG_US)


def _check(marks: dict[tuple[str, str], KeyMark], sent: list[Sent], h: Harness) -> None:
    landed = {(r["destination"], r["subscription"], r["tsnr"]) for r in h.tables["transactions"]}
    given_up = {(r["destination"], r["subscription"], t) for r in h.tables["gaps"]
                for t in r.get("settled_tsnrs") or []}
    for s in sent:
        commit = _us(s.commit_time)
        for dest in s.destinations:
            if (dest, s.subscription, s.tsnr) in landed or (
                    dest, s.subscription, s.tsnr) in given_up:
                continue
            mark = marks.get((dest, s.subscription), KeyMark()).marks.get(s.tx.dbid)
            assert mark is None or mark < commit, (
                f"watermark {mark} of {dest}/{s.subscription}/{s.tx.dbid} passed tsnr "
                f"{s.tsnr} committed at {commit}, not landed")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), count=st.integers(5, 40),
       faults=st.fixed_dictionaries({k: st.integers(0, 2) for k in KINDS if k != "restart"}),
       wrap=st.booleans(), cuts=st.lists(st.integers(1, 15), max_size=10))
@example(seed=131, count=32, faults={k: 2 if k == "corrupt" else 0 for k in KINDS
                                     if k != "restart"}, wrap=False, cuts=[])  # URBTTTIM flipped
def test_the_watermark_never_passes_a_transaction_that_has_not_landed(
        seed: int, count: int, faults: dict[str, int], wrap: bool, cuts: list[int]) -> None:
    config = sim_config("mixed", max_message_size=600, two_databases=True, c5_rate=0.0)
    rep, out, sent = simulate(config, count, seed=seed, faults=FaultPlan(counts=faults,
                                                                         wrap=wrap))
    h = Harness(rep, config=default_reassembly(tod_offset_us=rep.config.tod_offset_us),
                frame_rows=7)
    h.feed(out)
    marks: dict[tuple[str, str], KeyMark] = {}
    real = h.commit

    def commit(batch: BatchOutput) -> None:
        real(batch)
        _advance(marks, batch, h)
        _check(marks, sent, h)

    h.commit = commit  # type: ignore[method-assign]
    h.run(cuts)
    newest: dict[tuple[str, str, int], int] = defaultdict(int)
    for r in h.tables["transactions"]:
        if not r["initial_state"]:
            key = (r["destination"], r["subscription"], r["dbid"])
            newest[key] = max(newest[key], _us(r["commit_time"]))
    for (dest, sub, dbid), us in newest.items():
        mark = marks[(dest, sub)]
        if not mark.gaps:
            assert mark.marks[dbid] == us - LAG_US - 1, (dest, sub, dbid)
