"""One busy key's state call on a bench run's own messages, engine-free: its time and memory.

``profile_key.py`` makes its stream with the simulator; this reads the messages a
``bench_pipeline.py`` run loaded (its broker must be up: ``--keep-broker``, or
``python -m devtools.broker start --conf-file .bench/runs/RUN/conf.yaml``), so the call
sees exactly what the job's state task saw in one batch. Run from the repository root::

    .venv/bin/python benchmarks/profile_topic_key.py --run 20261127-064311           # 2 calls
    .venv/bin/python benchmarks/profile_topic_key.py --run 20261127-064311 --profile

It reads ``--calls`` batches of ``--batch`` messages from offset 0 of the run's topic, runs
the job's call (decode stage rows, ``state_stage.key_step`` with ``EarlyFiles``, then
``key_output``: Parquet files to a temporary folder, the cyclic GC paused) for the busiest
key of each batch, the state carried from call to call, and prints each call's time,
transactions/s and the growth of the process's peak RSS; ``--profile`` profiles the last.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import BENCH_DIR  # noqa: E402
from benchmarks.profile_key import direct_files, fast_landed, job_call, peak_mb  # noqa: E402
from pipeline.config import Settings, load_settings  # noqa: E402
from pipeline.spark.engine import state_stage  # noqa: E402
from pipeline.spark.engine.query import reassembly_config, record_decoder  # noqa: E402
from tests.support.harness import KafkaRecord, group_frames, message_rows  # noqa: E402


def read_topic(settings: Settings, count: int) -> list[KafkaRecord]:
    """The first ``count`` records of the run's source topic (partition 0)."""
    from confluent_kafka import Consumer, TopicPartition

    topic = next(iter(settings.source_topics()))
    consumer = Consumer({**settings.kafka.confluent(), "group.id": "profile-topic-key",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[KafkaRecord] = []
    try:
        while len(out) < count:
            msg = consumer.poll(10)
            if msg is None:
                break
            if not msg.error():
                out.append(KafkaRecord(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                       msg.value()))
    finally:
        consumer.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a bench run under .bench/runs (its topic)")
    p.add_argument("--batch", type=int, default=20_000, help="messages per call")
    p.add_argument("--calls", type=int, default=2, help="calls (the first warms up)")
    p.add_argument("--profile", action="store_true", help="profile the last call")
    p.add_argument("--top", type=int, default=40, help="functions shown")
    args = p.parse_args(argv)
    settings = load_settings(BENCH_DIR / "runs" / args.run / "conf.yaml")
    decoder, config = record_decoder(settings), reassembly_config(settings)
    state_stage.task_batch_id = lambda: 1  # the job's foreachBatch sets it; here one batch
    records = read_topic(settings, args.batch * args.calls)
    print(f"read {len(records)} messages of run {args.run}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        files = direct_files(folder)
        state, now = None, 1_795_000_000_000
        for call in range(args.calls):
            part = records[call * args.batch:(call + 1) * args.batch]
            frames = group_frames(message_rows(decoder, part), call, 0, 10_000)
            key = max(frames, key=lambda k: sum(len(f) for f in frames[k]))
            now += 1000
            profile = cProfile.Profile() if args.profile and call == args.calls - 1 else None
            before, started = peak_mb(), time.perf_counter()
            if profile:
                profile.enable()
            done, early = job_call(state, frames[key], now, config, key, decoder, files)
            if profile:
                profile.disable()
            seconds, state = time.perf_counter() - started, done.result.state
            landed = fast_landed(done, early)
            print(f"call {call}: key {key[1]}, {len(part)} messages, {landed} transactions "
                  f"by the fast path, {len(done.result.events)} events, {seconds:.2f} s "
                  f"({landed / seconds:,.0f} tx/s); peak RSS {before:,.0f} -> "
                  f"{peak_mb():,.0f} MB", flush=True)
            if profile:
                pstats.Stats(profile).sort_stats("cumtime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
