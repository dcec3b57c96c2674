"""One truth: the state stage with its fast path (``pipeline.reassembly.fast``) gives the rows,
state and timers that ``step`` alone gives, batch by batch, row for row.

Both runs go through the in-memory Kafka/Spark harness (tests/integration/harness.py) over the
same simulated stream — every fault kind the simulator has, both forms, random batch cuts,
shuffled rows, small frames — with the simulator answering the requests each run sends, so
any difference would also change what the runs read next.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.integration.harness as harness
from pipeline.sim import FaultPlan
from pipeline.sim.faults import KINDS
from pipeline.spark.engine.state_stage import KeyStep, state_function
from tests.integration.harness import (
    Harness,
    call_key,
    default_reassembly,
    group_frames,
    message_rows,
)
from tests.integration.scenarios import SMALLEST_MESSAGE, sim_config, simulate

#: A longer search than the suite's: FAST_PATH_EXAMPLES=500 pytest <this file>
FAST_SETTINGS = settings(max_examples=int(os.environ.get("FAST_PATH_EXAMPLES", "12")),
                         deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(seed: int, encoding: str, size: int, count: int, faults: FaultPlan, fast: bool,
         cuts: list[int], options: dict[str, Any], overrides: dict[str, Any]) -> Harness:
    config = sim_config(encoding, max_message_size=size, **overrides.get("sim", {}))
    rep, out, _ = simulate(config, count, seed=seed, faults=faults)
    reassembly = default_reassembly(tod_offset_us=rep.config.tod_offset_us,
                                    **overrides.get("machine", {}))
    h = Harness(rep, fast=fast, config=reassembly, **options)
    h.feed(out)
    h.run(cuts)
    return h


def _assert_same(slow: Harness, fast: Harness) -> None:
    assert len(fast.batches) == len(slow.batches)
    for a, b in zip(slow.batches, fast.batches, strict=True):
        assert b.calls == a.calls, a.batch_id
        for table, rows in a.tables.items():
            assert b.tables.get(table, []) == rows, (a.batch_id, table)
        assert b.checkpoint == a.checkpoint, a.batch_id
    assert fast.requests_sent == slow.requests_sent


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count what the fast path landed (so a test cannot pass by never taking it)."""
    seen = {"landed": 0}
    real = harness.key_step

    def spy(*args: Any, **kwargs: Any) -> KeyStep:
        done = real(*args, **kwargs)
        if done.landed is not None:
            seen["landed"] += len(done.landed["transactions"]["tsnr"])
        return done

    monkeypatch.setattr(harness, "key_step", spy)
    return seen


@FAST_SETTINGS
@given(seed=st.integers(0, 10_000), encoding=st.sampled_from(["ebcdic", "ascii", "mixed"]),
       size=st.sampled_from([SMALLEST_MESSAGE, 600, 4096, 32768]),
       count=st.integers(5, 40),
       faults=st.fixed_dictionaries({kind: st.integers(0, 2) for kind in KINDS}),
       wrap=st.booleans(),
       cuts=st.lists(st.integers(1, 15), max_size=10),
       shuffle=st.integers(0, 100), frame_rows=st.sampled_from([3, 10_000]),
       c5_rate=st.sampled_from([0.0, 0.2]),
       # STAT every 60 s: every 2 s, a stalled continuation (600 s) kept step alone asking
       # past the harness's 500 batches (seed 467), which says nothing of the fast path
       machine=st.sampled_from([{}, {"duplicate_window": 4}, {"max_buffered_bytes": 3000},
                                {"stat_interval_ms": 60_000}, {"partial_timeout_ms": 1}]))
def test_fast_path_gives_what_step_alone_gives(seed: int, encoding: str, size: int,
                                               count: int, faults: dict[str, int], wrap: bool,
                                               cuts: list[int], shuffle: int,
                                               frame_rows: int, c5_rate: float,
                                               machine: dict[str, Any]) -> None:
    plan = FaultPlan(counts=faults, wrap=wrap)
    options = {"shuffle_seed": shuffle, "frame_rows": frame_rows}
    overrides = {"sim": {"c5_rate": c5_rate}, "machine": machine}
    slow = _run(seed, encoding, size, count, plan, False, cuts, options, overrides)
    fast = _run(seed, encoding, size, count, plan, True, cuts, options, overrides)
    _assert_same(slow, fast)


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii", "mixed"])
def test_clean_batches_go_the_fast_way(encoding: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches without trouble land (nearly) all their transactions on the fast path; only
    what follows a status (the STRT, TERM) or a continuation goes to ``step``."""
    seen = _counting(monkeypatch)
    plan = FaultPlan()
    cuts = [1] + [20] * 30
    slow = _run(7, encoding, 32768, 300, plan, False, cuts, {}, {})
    fast = _run(7, encoding, 32768, 300, plan, True, cuts, {}, {})
    _assert_same(slow, fast)
    landed = len(fast.tables["transactions"])
    assert landed >= 300
    assert seen["landed"] >= 0.8 * landed


@FAST_SETTINGS
@given(seed=st.integers(0, 1000), encoding=st.sampled_from(["ebcdic", "ascii"]),
       damage=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 1 << 20),
                                 st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.integers(1, 60))
def test_damaged_bytes_never_slip_through(seed: int, encoding: str,
                                          damage: list[tuple[int, int, int]],
                                          cut: int) -> None:
    """Any byte of any message changed: the fast path either leaves the message to ``step``
    or lands exactly what ``step`` lands (``columnar``'s ``plain`` must never be wrong)."""
    rep, out, _ = simulate(sim_config(encoding, max_message_size=4096), 30, seed=seed)
    h = Harness(rep)
    h.feed(out)
    records = list(h.unread)
    for which, where, value in damage:
        r = records[which % len(records)]
        data = bytearray(r.value)
        data[where % len(data)] = value
        records[which % len(records)] = harness.KafkaRecord(r.topic, r.partition, r.offset,
                                                            r.key, bytes(data))
    states: dict[tuple[str, str], bytes | None] = {}
    for batch, part in enumerate((records[:cut], records[cut:])):
        frames = group_frames(message_rows(h.decoder, part), batch, seed, 10_000)
        for key in sorted(frames):
            blob = states.get(key)
            slow = call_key(blob, frames[key], h.now_ms, h.config, key, h.decoder)
            fast = call_key(blob, frames[key], h.now_ms, h.config, key, h.decoder, fast=True)
            assert fast[:3] == slow[:3], key
            states[key] = slow[0]


class _GroupState:
    """What applyInPandasWithState hands the state function, in memory."""

    def __init__(self, blob: bytes | None, now_ms: int) -> None:
        self.blob, self.now_ms, self.timeout_ms = blob, now_ms, None
        self.hasTimedOut = False

    def getCurrentProcessingTimeMs(self) -> int:
        return self.now_ms

    @property
    def exists(self) -> bool:
        return self.blob is not None

    @property
    def get(self) -> tuple[bytes | None]:
        return (self.blob,)

    def update(self, value: tuple[bytes]) -> None:
        self.blob = value[0]

    def remove(self) -> None:
        self.blob = None

    def setTimeoutDuration(self, ms: int) -> None:
        self.timeout_ms = ms


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_the_state_function_gives_the_same_output_with_its_fast_path(encoding: str) -> None:
    """The applyInPandasWithState function as the job builds it (``stream.fast_path`` on or
    off): the same output frames (table rows, the metrics row with its latency times) and
    state, call by call."""
    rep, out, _ = simulate(sim_config(encoding), 60, seed=5, faults=FaultPlan(
        counts={"drop_transaction": 1, "duplicate": 1}))
    h = Harness(rep)
    h.feed(out)
    calls = {fast: state_function(h.config, h.decoder, None, fast) for fast in (False, True)}
    states: dict[tuple[str, str], bytes | None] = {}
    now = h.now_ms
    for batch, cut in enumerate((slice(0, 7), slice(7, 40), slice(40, None))):
        now += 1000
        frames = group_frames(message_rows(h.decoder, h.unread[cut]), batch, batch, 10_000)
        for key in sorted(frames):
            outputs = {}
            for fast, fn in calls.items():
                group = _GroupState(states.get(key), now)
                (frame,) = fn(("0", *key), iter(frames[key]), group)
                outputs[fast] = (frame.to_dict("records"), group.blob, group.timeout_ms)
            assert outputs[True] == outputs[False], key
            states[key] = outputs[False][1]


@pytest.mark.parametrize(("chunk", "c5_rate"), [(1, 0.0), (1, 0.2), (3, 0.05)])
def test_decoding_in_growing_chunks_takes_the_same_messages(
        chunk: int, c5_rate: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fast._decode_prefix`` from a tiny first chunk (1, 4, 16, … messages): the same rows,
    state and fast-path share as the default chunk, statuses or not."""
    import pipeline.reassembly.fast as fast_module

    cuts = [1] + [40] * 20
    overrides = {"sim": {"c5_rate": c5_rate}}
    default_seen = _counting(monkeypatch)
    default = _run(11, "mixed", 32768, 400, FaultPlan(), True, cuts, {}, overrides)
    taken = default_seen["landed"]
    monkeypatch.setattr(fast_module, "_FIRST_CHUNK", chunk)
    seen = _counting(monkeypatch)
    chunked = _run(11, "mixed", 32768, 400, FaultPlan(), True, cuts, {}, overrides)
    _assert_same(default, chunked)
    assert seen["landed"] == taken > 0
