"""The demo: the whole product on the embedded default, on one machine.

    python -m devtools.demo [--conf-file conf/local.yaml] [--transactions 300] [--seed 7]

It resets the local topics, lake and checkpoint named in the conf, then runs the replicator
simulator — a real replicator behind a real MQ source connector: no Kafka key, STRT/REST
naming no subscription, a TOD clock on UTC+1 with leap seconds, a circular resend buffer —
with a few injected faults (lost transactions, a lost continuation message, a duplicate, a
corrupted message, a replicator restart, a connector that re-produces a batch of hundreds of
messages) against the local broker while the streaming job (the same code spark-submit runs)
reads, reassembles, asks the simulator to resend what was lost, and lands everything in Delta.
A transaction lost early is gone from the resend buffer by the time it is asked for: the
replicator answers TRSP 131/35 and its gap ends unrecoverable, tsnr by tsnr. At the end it
prints what landed: rows per table, gaps and their states, duplicates, alerts sent,
quarantined messages. Last, with the job still running, it corrupts one row of
``current_color_4`` by hand and runs one ``urbpipe reconcile`` round over every ISN of the file:
the round finds the row (``differs``), the job's landing of the answer repairs it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from devtools.sim.model import ResendBufferDef
from pipeline.config import ConfigError, Settings, load_settings

FAULTS = {"drop_transaction": 3, "drop_continuation": 1, "duplicate": 2, "corrupt": 1,
          "restart": 1, "redeliver": 1}
#: A connector redelivery of up to 400 messages, and a resend buffer (before images only) of
#: 24 KB: about the last 50 transactions. The simulator sends all 300 before the job's first
#: batch asks for anything, so the oldest lost ones are overwritten (TRSP 131/35), the newest
#: are resent.
SIM = {"redelivery_max_messages": 400,
       "resend_buffers": (ResendBufferDef(name="RESEND1", size=24_000),)}


def reset(settings: Settings) -> None:
    """Empty the demo's topics, lake and checkpoint so every demo run starts the same way."""
    from confluent_kafka.admin import AdminClient

    from devtools import broker

    admin = AdminClient(settings.kafka.confluent())
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t for t in settings.topics.all_created() if t in existing]
    if doomed:
        for fut in admin.delete_topics(doomed).values():
            fut.result(30)
        time.sleep(2)
    broker.create_topics(settings)
    for location in (settings.stream.lake_dir, settings.stream.checkpoint_dir):
        shutil.rmtree(settings.location(location), ignore_errors=True)


LATEST_GAPS = """
    SELECT * FROM (
      SELECT *, row_number() OVER (PARTITION BY destination, subscription, gap_id
                                   ORDER BY batch_id DESC, seq DESC) AS rn
      FROM delta.`{path}`) WHERE rn = 1"""


def gaps_settled(settings: Settings) -> bool:
    """True when every gap is filled or unrecoverable (nothing the replicator still owes).

    Read with delta-rs, as ``urbpipe gaps`` does: it is polled beside the running query, and
    a Spark query of the gaps table took 2.5-3.5 s of the same two cores each time."""
    from pipeline.ops.gaps_cmd import OPEN_STATES, load_gaps
    from pipeline.ops.lake import Lake

    return not any(g.state in OPEN_STATES for g in load_gaps(Lake(settings)))


def progress(batch_id: int, counts: dict[str, int], seconds: float) -> None:
    shown = ", ".join(f"{counts[t]} {t}" for t in ("transactions", "records", "images", "gaps",
                                                   "requests", "alerts", "quarantine")
                      if counts.get(t))
    print(f"batch {batch_id} ({seconds:.1f}s): {shown or 'nothing new'}", flush=True)


def report(spark, settings: Settings) -> None:
    from pipeline.spark.land.tables import TABLES, table_path

    def table(name: str):
        return spark.read.format("delta").load(table_path(settings, name))

    print("\n== rows per table ==")
    for name in TABLES:
        print(f"  {name:<14} {table(name).count():>7}")
    print("\n== transactions per subscription ==")
    table("transactions").groupBy("destination", "subscription", "epoch", "origin").agg(
        {"tsnr": "count"}).withColumnRenamed("count(tsnr)", "transactions").orderBy(
        "destination", "subscription", "epoch", "origin").show(truncate=False)
    print("== gaps (latest state of each) ==")
    spark.sql(LATEST_GAPS.format(path=table_path(settings, "gaps"))).select(
        "destination", "subscription", "epoch", "from_tsnr", "to_tsnr", "state",
        "requests_sent", "filled_tsnrs", "settled_tsnrs", "reason").orderBy(
        "destination", "subscription", "epoch", "from_tsnr").show(truncate=False)
    print("== duplicates dropped (a connector redelivery, a flagged repeat …) ==")
    table("duplicates").groupBy("destination", "subscription", "reason").count().orderBy(
        "destination", "subscription").show(truncate=False)
    print("== alerts sent ==")
    table("alerts").groupBy("kind", "severity").count().orderBy("kind").show(truncate=False)
    from pipeline.spark.typed.stage import changes_table, current_table

    for lay in settings.layouts:
        changes, current = changes_table(lay), current_table(lay)
        print(f"== typed tables of {lay.subscription} file {lay.fnr}: {table(changes).count()} "
              f"changes, current state ({current}, first rows) ==")
        table(current).orderBy("isn").show(5, truncate=False)
    print("== quarantine ==")
    table("quarantine").select("source", "topic", "partition", "offset", "reason").show(
        truncate=80)


def reconcile_round(settings: Settings) -> None:
    """Corrupt one ``current_`` row of COLOR/4 by hand, then one full reconciliation round."""
    from deltalake import DeltaTable

    from pipeline.ops.reconcile_cli import describe
    from pipeline.ops.reconcile_cmd import Options, run_round
    from pipeline.spark.land.tables import table_path

    path = table_path(settings, "current_color_4")
    rows = DeltaTable(path).to_pyarrow_table(columns=["isn", "color", "deleted"]).to_pylist()
    live = sorted(r["isn"] for r in rows if not r["deleted"])
    if not live:
        print("\n== reconcile: no COLOR row to corrupt ==")
        return
    DeltaTable(path).update(updates={"color": "'CORRUPTED'"}, predicate=f"isn = {live[0]}")
    print(f"\n== reconcile: ISN {live[0]} of current_color_4 corrupted by hand (color = "
          "'CORRUPTED'); one full round (urbpipe reconcile --file COLOR/4 --full) ==", flush=True)
    result = run_round(settings, Options(files=("COLOR/4",), full=True, timeout=120),
                       progress=lambda line: print(f"  {line}", flush=True))
    print(describe(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__)
    parser.add_argument("--conf-file", default=None)
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.conf_file)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from devtools.sim import FaultPlan
    from devtools.sim.live import LiveReplicator
    from pipeline.ops.metrics import job_metrics
    from pipeline.spark.engine.drain import await_idle, stop_between_batches
    from pipeline.spark.engine.query import start_stream
    from pipeline.spark.engine.session import build_session

    print("demo: resetting the local topics, lake and checkpoint", flush=True)
    reset(settings)
    spark = build_session(settings)
    query = start_stream(spark, settings, on_batch=progress, observe=job_metrics)
    sim = LiveReplicator(settings, transactions=args.transactions, seed=args.seed,
                         faults=FaultPlan(counts=FAULTS), rate=200.0, verbose=True,
                         sim=SIM).start()
    try:
        await_idle(query, timeout_s=args.timeout, quiet_batches=3,
                   until=lambda: sim.streamed.is_set() and gaps_settled(settings))
        reconcile_round(settings)
    finally:
        sim.stop()
        stop_between_batches(query)
    report(spark, settings)
    spark.stop()
    from pipeline.ops.monitoring import where

    print("\n== on call: where the metrics, rules, dashboard and runbook are ==")
    print("\n".join(f"  {line}" for line in where(settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
