"""Profile one busy key's state call, engine-free: where its time goes, how much it holds.

Run from the repository root (one process, one core)::

    .venv/bin/python benchmarks/profile_key.py                       # 5,000 messages, profiled
    .venv/bin/python benchmarks/profile_key.py --flush 1000000000    # never flush early
    .venv/bin/python benchmarks/profile_key.py --no-profile          # time and memory only

The call is the job's with the direct writer (``state_stage.key_step`` with ``EarlyFiles``,
then ``key_output``: Parquet files to a temporary folder; the cyclic GC paused, as the job
pauses it) over the simulator's stream for one subscription (COLOR, EBCDIC), as
bench_state.py makes it: ``--per-message`` transactions per
message and ``--c5-rate`` C5 statuses (a status every few messages, as a real stream has).
The key's first call (the STRT and 10 messages) is a warm-up. It prints the measured call's
time, transactions per second, the growth of the process's peak RSS during it (what the call
held), and with the profile the functions by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from benchmarks.bench_state import WARM_UP, stream  # noqa: E402
from pipeline.reassembly import KeyState, ReassemblyConfig  # noqa: E402
from pipeline.reassembly import call as reassembly_call  # noqa: E402
from pipeline.reassembly.call import CallResult  # noqa: E402
from pipeline.spark.engine import state_stage  # noqa: E402
from pipeline.spark.engine.decode_stage import RecordDecoder  # noqa: E402
from pipeline.spark.engine.gcpause import gc_paused  # noqa: E402
from pipeline.spark.land.datafiles import DataFiles  # noqa: E402
from pipeline.spark.land.tables import DIRECT_TABLES  # noqa: E402
from tests.support.harness import (  # noqa: E402
    decoder_for,
    default_reassembly,
    group_frames,
    message_rows,
)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def direct_files(folder: str) -> DataFiles:
    """The direct writer into ``folder`` (one subfolder per table), no mirrors."""
    files = DataFiles(paths={t: f"{folder}/{t}" for t in DIRECT_TABLES}, stats_columns=32,
                      mirror_subscriptions=frozenset(), mirror_statuses=frozenset())
    for path in files.paths.values():
        Path(path).mkdir(parents=True)
    return files


def job_call(state: KeyState | None, frames: list[pd.DataFrame], now: int,
             config: ReassemblyConfig, key: tuple[str, str], decoder: RecordDecoder,
             files: DataFiles) -> tuple[CallResult, state_stage.EarlyFiles]:
    """One key's call as the job makes it with the direct writer and the fast path."""
    with gc_paused():  # as both state APIs run the call (gcpause.py)
        early = state_stage.EarlyFiles(files, now, config.tod_offset_us)
        done = state_stage.key_step(state, frames, now, config, key, decoder, True, early)
        state_stage.key_output(key, frames, done, done.result.events, now, config, files,
                               early)
    return done, early


def fast_landed(done: CallResult, early: state_stage.EarlyFiles) -> int:
    """Transactions the call's fast path landed (flushed early, and the rest)."""
    rest = len(done.landed["transactions"]["tsnr"]) if done.landed else 0
    return sum(len(t) for t in early.times) + rest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=5000, help="messages in the measured call")
    p.add_argument("--per-message", type=int, default=19, help="transactions per message")
    p.add_argument("--c5-rate", type=float, default=0.02, help="share of C5 statuses")
    p.add_argument("--flush", type=int, default=reassembly_call.FLUSH_TRANSACTIONS,
                   help="FLUSH_TRANSACTIONS for this run")
    p.add_argument("--no-profile", action="store_true", help="time and memory only")
    p.add_argument("--top", type=int, default=30, help="functions shown")
    args = p.parse_args(argv)
    reassembly_call.FLUSH_TRANSACTIONS = args.flush
    state_stage.task_batch_id = lambda: 1  # the job's foreachBatch sets it; here one batch
    t = time.perf_counter()
    rep, records = stream("ebcdic", WARM_UP + args.messages, args.per_message, 1, args.c5_rate)
    print(f"stream: {len(records)} messages, "
          f"{sum(len(r.value) for r in records) / len(records):,.0f} B each, made in "
          f"{time.perf_counter() - t:.0f} s", flush=True)
    config = default_reassembly(tod_offset_us=rep.config.tod_offset_us)
    decoder = decoder_for(rep.config)
    with tempfile.TemporaryDirectory() as folder:
        files = direct_files(folder)
        state, now = None, 1_750_000_000_000
        for call, part in enumerate((records[:WARM_UP], records[WARM_UP:])):
            frames = group_frames(message_rows(decoder, part), call, 0, 10_000)
            key = next(k for k in frames if k[1])
            now += 1000
            profile = cProfile.Profile() if call and not args.no_profile else None
            before, started, cpu = peak_mb(), time.perf_counter(), time.process_time()
            if profile:
                profile.enable()
            done, early = job_call(state, frames[key], now, config, key, decoder, files)
            if profile:
                profile.disable()
            seconds, state = time.perf_counter() - started, done.result.state
            cpu = time.process_time() - cpu
            if call == 0:
                continue
            landed = fast_landed(done, early)
            print(f"call: {len(part)} messages, {landed} transactions landed by the fast path "
                  f"({len(early.frames)} early flushes), {len(done.result.events)} events, "
                  f"{seconds:.2f} s ({landed / seconds:,.0f} tx/s; CPU {cpu:.2f} s"
                  f"{', under the profiler' if profile else ''}); peak RSS "
                  f"{before:,.0f} -> {peak_mb():,.0f} MB")
            if profile:
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("cumtime").print_stats(args.top)
                print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
