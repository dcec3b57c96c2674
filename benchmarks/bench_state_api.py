# Spark's callback names (handleInputRows, onQueryProgress, timerValues) are camelCase.
# ruff: noqa: N802, N803
"""State API benchmark: applyInPandasWithState vs transformWithStateInPandas, large partial txn.

Why: the stateful stage may move from ``applyInPandasWithState`` (one state value per
key, rewritten whole on every call) to Spark 4's ``transformWithStateInPandas`` (value, list
and map state plus timers) only if a measurement with a huge transaction open in state shows
the latter keeps batch time flat where the former does not. This script is that measurement.

The workload is what a huge replicator transaction looks like to the stateful stage: one key
receives a transaction that continues over many micro-batches (URBC continuations), each batch
adding ``--mb / --batches`` MB of record images, and the transaction completes in one extra
batch at the end. A few small keys open and complete a short transaction in every batch, as the
ordinary traffic around it.

- Variant A (``applyInPandasWithState``): the product's pattern. The state is one binary value,
  the real ``pipeline.reassembly.KeyState`` with a real ``Partial`` holding ``RecordOut`` and
  ``ImageOut`` objects, read with ``KeyState.from_bytes``, cloned (as ``step`` does), extended
  and written back with ``KeyState.to_bytes`` on every call, with the timeout set on every call.
  The per-element reassembly checks of ``step`` are left out: they cost the same in both
  variants, and the question here is only what the state API costs.
- Variant B (``transformWithStateInPandas``): the small header (the same ``KeyState`` blob with
  an empty ``Partial.records``/``images``) in a ValueState, the records and images appended to
  two ListStates (written once each, read once at completion), a processing-time timer
  re-registered on every call through the handle.
- Variant C (control, ``--variants C``): ``transformWithStateInPandas`` with the product's one
  blob in a single ValueState, rewritten every call like A. It tells whether the difference
  comes from the API or from the state layout (append-only list vs one rewritten value).

Input comes from a folder of parquet files written before the query starts and read with the
file source and ``maxFilesPerTrigger=1``, so one file is one micro-batch and no Kafka is needed.
Every variant runs in its own Python process (and so its own JVM) with a fresh checkpoint; runs
alternate A, B, A, B so machine load drifts hit both.

Run from the repository root::

    .venv/bin/python benchmarks/bench_state_api.py --mb 100 --batches 12 --runs 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.reassembly.assembler import Partial  # noqa: E402
from pipeline.reassembly.events import ImageOut, RecordOut  # noqa: E402
from pipeline.reassembly.state import KeyState  # noqa: E402

BIG_KEY = "BIG"
TIMEOUT_MS = 600_000  # a gap-retry-like timer, far in the future: armed on every call
INPUT_DDL = "key string, seq long, kind string, tsnr long, rsnr long, payload binary"
OUTPUT_DDL = "key string, tsnr long, images long, bytes long, crc long"
RECORDS_DDL = ("rsnr long, fnr int, isn long, type string, resend boolean, rsp int, "
               "subcode int, record_time long, dcnt int, errc string")
IMAGES_DDL = "rsnr long, dsnr int, image_type string, payload binary"


# --------------------------------------------------------------------------- input files
def _payload(rng: random.Random, size: int, entropy: float) -> bytes:
    """An image payload: a random part and EBCDIC blanks, compressing about like record data."""
    random_len = int(size * entropy)
    return rng.randbytes(random_len) + b"\x40" * (size - random_len)


def write_input(folder: Path, mb: float, batches: int, image_bytes: int, small_keys: int,
                entropy: float) -> dict[str, int]:
    """Write one parquet file per micro-batch: ``batches`` growing chunks, then the completion.

    Returns what the big transaction should add up to, to check both variants' output.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    per_batch = int(mb * 1024 * 1024 / batches / image_bytes)
    seq, rsnr, crc, total = 0, 0, 0, 0
    rng = random.Random(5)
    base = time.time() - 3600
    for b in range(batches + 1):
        rows: dict[str, list[Any]] = {n: [] for n in ("key", "seq", "kind", "tsnr", "rsnr",
                                                      "payload")}

        def add(key: str, kind: str, tsnr: int, r: int, payload: bytes | None,
                rows: dict[str, list[Any]] = rows) -> None:
            nonlocal seq
            for name, value in zip(rows, (key, seq, kind, tsnr, r, payload), strict=True):
                rows[name].append(value)
            seq += 1

        if b == 0:
            add(BIG_KEY, "T", 1, 0, None)
        if b < batches:
            for _ in range(per_batch):
                rsnr += 1
                p = _payload(rng, image_bytes, entropy)
                crc = zlib.crc32(p, crc)
                total += len(p)
                add(BIG_KEY, "D", 1, rsnr, p)
        else:
            add(BIG_KEY, "E", 1, 0, None)
        for k in range(small_keys):  # ordinary traffic: a short whole transaction per key
            key = f"SMALL{k}"
            add(key, "T", b + 1, 0, None)
            for r in range(1, 11):
                add(key, "D", b + 1, r, _payload(rng, image_bytes, entropy))
            add(key, "E", b + 1, 0, None)
        path = folder / f"part-{b:05d}.parquet"
        pq.write_table(pa.table(rows, schema=pa.schema([
            ("key", pa.string()), ("seq", pa.int64()), ("kind", pa.string()),
            ("tsnr", pa.int64()), ("rsnr", pa.int64()), ("payload", pa.binary())])), path)
        os.utime(path, (base + b, base + b))  # the file source orders files by mtime
    return {"images": rsnr, "bytes": total, "crc": crc}


# --------------------------------------------------------------------------- shared logic
def _open(tsnr: int, seq: int, now_ms: int) -> Partial:
    """A Partial as the assembler opens it at a URBT (header values are placeholders)."""
    head = {"urbtrcnt": 0, "urbtttim": 0, "urbtdbid": 1, "urbtrsnd": 0, "urbtptrn": 0}
    return Partial(tsnr=tsnr, head=head, token="", sent_time=0, topic="bench",
                   first=(0, seq), last=(0, seq), cont=False, touched_ms=now_ms)


def _record(rsnr: int) -> RecordOut:
    return RecordOut(rsnr=rsnr, fnr=11, isn=rsnr, type="U", resend=False, rsp=0, subcode=0,
                     record_time=0, dcnt=1)


def _summary(key: str, tsnr: int, payloads: Iterator[bytes]) -> dict[str, Any]:
    crc, total, n = 0, 0, 0
    for p in payloads:
        crc, total, n = zlib.crc32(p, crc), total + len(p), n + 1
    return {"key": key, "tsnr": tsnr, "images": n, "bytes": total, "crc": crc}


def _rows(frames: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """All rows of the group in input order (Spark does not keep it: sort, as the product does)."""
    parts = list(frames)
    if not parts:
        return pd.DataFrame(columns=["seq", "kind", "tsnr", "rsnr", "payload"])
    return pd.concat(parts, ignore_index=True).sort_values("seq", kind="stable")


def _out(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["key", "tsnr", "images", "bytes", "crc"])


# --------------------------------------------------------------------------- variants A, C
def _apply_whole(key: str, st: KeyState, pdf: pd.DataFrame, now_ms: int) -> list[dict[str, Any]]:
    """Variants A and C: add the rows to the Partial inside the one state object."""
    out: list[dict[str, Any]] = []
    for seq, kind, tsnr, rsnr, payload in zip(pdf["seq"], pdf["kind"], pdf["tsnr"],
                                              pdf["rsnr"], pdf["payload"], strict=True):
        if kind == "T":
            st.partial = _open(int(tsnr), int(seq), now_ms)
        elif kind == "D" and st.partial is not None:
            p = st.partial
            p.records.append(_record(int(rsnr)))
            p.images.append(ImageOut(int(rsnr), 1, "A", bytes(payload)))
            p.nbytes += len(payload)
            p.last, p.touched_ms = (0, int(seq)), now_ms
        elif kind == "E" and st.partial is not None:
            payloads = (i.payload for i in st.partial.images)
            out.append(_summary(key, st.partial.tsnr, payloads))
            st.partial = None
            st.next_u = int(tsnr) + 1
    return out


def state_function_a(key: tuple[str], frames: Iterator[pd.DataFrame],
                     state: Any) -> Iterator[pd.DataFrame]:
    """applyInPandasWithState: the whole KeyState in one value, read and rewritten every call."""
    now_ms = int(state.getCurrentProcessingTimeMs())
    st = KeyState.from_bytes(state.get[0]) if state.exists else KeyState()
    st = st.clone()  # step() never changes the state it was given
    out = [] if state.hasTimedOut else _apply_whole(key[0], st, _rows(frames), now_ms)
    if st.is_empty():
        state.remove()
    else:
        state.update((st.to_bytes(),))
        state.setTimeoutDuration(TIMEOUT_MS)  # set on every call (see DESIGN.md, Timers)
    yield _out(out)


# --------------------------------------------------------------------------- variant B
def _processor_class(variant: str) -> type:
    """Defined lazily: importing StatefulProcessor needs pyspark, the input writer does not."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.streaming.stateful_processor import TimerValues

    class BigTxnProcessor(StatefulProcessor):
        """Small header in ValueState; records and images appended to ListState; a timer."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.header = handle.getValueState("header", "blob binary")
            self.records = handle.getListState("records", RECORDS_DDL)
            self.images = handle.getListState("images", IMAGES_DDL)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: TimerValues) -> Iterator[pd.DataFrame]:
            now_ms = int(timerValues.getCurrentProcessingTimeInMs())
            blob = self.header.get() if self.header.exists() else None
            st = KeyState.from_bytes(blob[0]) if blob else KeyState()
            out: list[dict[str, Any]] = []
            new_records: list[tuple] = []
            new_images: list[tuple] = []
            pdf = _rows(rows)
            for seq, kind, tsnr, rsnr, payload in zip(pdf["seq"], pdf["kind"], pdf["tsnr"],
                                                      pdf["rsnr"], pdf["payload"], strict=True):
                if kind == "T":
                    st.partial = _open(int(tsnr), int(seq), now_ms)
                    self.records.clear()
                    self.images.clear()
                elif kind == "D" and st.partial is not None:
                    p = st.partial
                    r = _record(int(rsnr))
                    new_records.append((r.rsnr, r.fnr, r.isn, r.type, r.resend, r.rsp,
                                        r.subcode, r.record_time, r.dcnt, r.errc))
                    new_images.append((int(rsnr), 1, "A", bytes(payload)))
                    p.nbytes += len(payload)
                    p.nimg += 1
                    p.last, p.touched_ms = (0, int(seq)), now_ms
                elif kind == "E" and st.partial is not None:
                    # the one read of the list: at completion, streamed from the store
                    stored = (row[3] for row in self.images.get()) if self.images.exists() \
                        else iter(())
                    done = itertools.chain(stored, (i[3] for i in new_images))
                    out.append(_summary(key[0], st.partial.tsnr, done))
                    st.partial = None
                    st.next_u = int(tsnr) + 1
                    new_records, new_images = [], []
                    self.records.clear()
                    self.images.clear()
            if new_records:
                self.records.appendList(new_records)
                self.images.appendList(new_images)
            for t in list(self.handle.listTimers()):
                self.handle.deleteTimer(t)
            if st.is_empty():
                self.header.clear()
            else:
                self.header.update((st.to_bytes(),))
                self.handle.registerTimer(now_ms + TIMEOUT_MS)
            yield _out(out)

        def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                               expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            yield _out([])

        def close(self) -> None:
            pass

    class WholeBlobProcessor(StatefulProcessor):
        """Control: the product's one-blob state kept in a ValueState, rewritten every call."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.state = handle.getValueState("state", "blob binary")

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: TimerValues) -> Iterator[pd.DataFrame]:
            now_ms = int(timerValues.getCurrentProcessingTimeInMs())
            blob = self.state.get() if self.state.exists() else None
            st = (KeyState.from_bytes(blob[0]) if blob else KeyState()).clone()
            out = _apply_whole(key[0], st, _rows(rows), now_ms)
            for t in list(self.handle.listTimers()):
                self.handle.deleteTimer(t)
            if st.is_empty():
                self.state.clear()
            else:
                self.state.update((st.to_bytes(),))
                self.handle.registerTimer(now_ms + TIMEOUT_MS)
            yield _out(out)

        def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                               expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            yield _out([])

        def close(self) -> None:
            pass

    return {"B": BigTxnProcessor, "C": WholeBlobProcessor}[variant]


# --------------------------------------------------------------------------- one run
def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _session(work: Path):
    """The product's session settings (RocksDB, changelog, shuffle partitions) with own paths."""
    from pyspark.sql import SparkSession

    from pipeline.config import load_settings
    from pipeline.spark.engine.session import session_conf

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = session_conf(load_settings(ROOT / "conf" / "test.yaml"))
    conf["spark.app.name"] = "bench-state-api"
    conf["spark.sql.warehouse.dir"] = str(work / "warehouse")
    conf["spark.driver.extraJavaOptions"] = f"-Dderby.system.home={work}"
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, conf


def run_one(variant: str, input_dir: Path, work: Path, expected: dict[str, int],
            batches: int, timeout_s: float = 1200.0) -> dict[str, Any]:
    """One query from a fresh checkpoint; per-batch figures from query progress."""
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark, conf = _session(work)
    checkpoint = work / "checkpoint"
    shutil.rmtree(checkpoint, ignore_errors=True)
    sizes: dict[int, int] = {}

    class CheckpointSize(StreamingQueryListener):
        """Checkpoint folder size right after each batch committed (before the next starts)."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            sizes[event.progress.batchId] = _du(checkpoint)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(CheckpointSize())
    stream = (spark.readStream.schema(INPUT_DDL).option("maxFilesPerTrigger", 1)
              .parquet(str(input_dir)))
    grouped = stream.groupBy("key")
    if variant == "A":
        result = grouped.applyInPandasWithState(
            state_function_a, outputStructType=OUTPUT_DDL, stateStructType="state binary",
            outputMode="update", timeoutConf=GroupStateTimeout.ProcessingTimeTimeout)
    else:
        result = grouped.transformWithStateInPandas(
            statefulProcessor=_processor_class(variant)(), outputStructType=OUTPUT_DDL,
            outputMode="Update", timeMode="ProcessingTime")
    sink = f"bench_out_{variant}"
    query = (result.writeStream.format("memory").queryName(sink).outputMode("update")
             .option("checkpointLocation", str(checkpoint)).start())
    error: str | None = None
    started = time.time()
    # Not processAllAvailable(): with processing-time timers Spark runs a no-data batch after
    # every batch, so "no new data" is never signalled. Wait for the data batches instead.
    progress: list[dict[str, Any]] = []
    while time.time() - started < timeout_s:
        if query.exception() is not None:
            error = str(query.exception())
            break
        if not query.isActive:
            error = "query stopped"
            break
        progress = [json.loads(p.json) for p in query.recentProgress]
        if sum(1 for p in progress if p.get("numInputRows")) >= batches + 1:
            break
        time.sleep(0.2)
    else:
        error = f"timed out after {timeout_s} s"
    wall = time.time() - started
    time.sleep(1)  # let the listener see the last batch
    progress = [json.loads(p.json) for p in query.recentProgress]
    query.stop()
    out = [] if error else [r.asDict() for r in spark.table(sink).collect()]
    big = [r for r in out if r["key"] == BIG_KEY]
    rows = []
    for p in progress:
        ops = p.get("stateOperators") or [{}]
        op = ops[0]
        custom = op.get("customMetrics", {})
        rows.append({
            "batch": p["batchId"], "input": p.get("numInputRows", 0),
            "trigger_ms": p["durationMs"].get("triggerExecution"),
            "add_ms": p["durationMs"].get("addBatch"),
            "commit_ms": op.get("commitTimeMs"),
            "state_rows": op.get("numRowsTotal"), "state_mem": op.get("memoryUsedBytes"),
            "sst_bytes": custom.get("rocksdbSstFileSize"),
            "checkpoint": sizes.get(p["batchId"]),
        })
    # only batches that carried data, one per input file
    rows = [r for r in rows if r["input"]][: batches + 1]
    ok = bool(big) and all(big[0][k] == expected[k] for k in ("images", "bytes", "crc"))
    spark.stop()
    return {"variant": variant, "error": error, "wall_s": round(wall, 1), "batches": rows,
            "big_ok": ok, "big": big, "load": os.getloadavg(),
            "spark": __import__("pyspark").__version__,
            "provider": conf["spark.sql.streaming.stateStore.providerClass"].rsplit(".", 1)[-1]}


# --------------------------------------------------------------------------- report
def _slope(ys: list[float]) -> float:
    """Least-squares slope per batch: how batch time grows as the open transaction grows."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    return num / sum((i - mx) ** 2 for i in range(n))


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1048576:.1f}"


def report(res: dict[str, Any], mb_per_batch: float) -> None:
    v = res["variant"]
    api = {"A": "applyInPandasWithState", "B": "transformWithStateInPandas, ListState",
           "C": "transformWithStateInPandas, one ValueState blob"}[v]
    print(f"\n=== variant {v} ({api}) "
          f"spark {res['spark']} {res['provider']} wall {res['wall_s']} s "
          f"load {'/'.join(f'{x:.1f}' for x in res['load'])}")
    if res["error"]:
        print("FAILED:", res["error"][:4000])
        return
    print(f"{'batch':>5} {'rows':>6} {'open MB':>7} {'trigger ms':>10} {'addBatch ms':>11} "
          f"{'commit ms':>9} {'state rows':>10} {'state mem MB':>12} {'sst MB':>7} "
          f"{'ckpt MB':>8}")
    for i, r in enumerate(res["batches"]):
        open_mb = mb_per_batch * (i + 1) if i < len(res["batches"]) - 1 else 0.0
        print(f"{r['batch']:>5} {r['input']:>6} {open_mb:>7.1f} {r['trigger_ms']:>10} "
              f"{r['add_ms']:>11} {r['commit_ms']!s:>9} {r['state_rows']!s:>10} "
              f"{_mb(r['state_mem']):>12} {_mb(r['sst_bytes']):>7} {_mb(r['checkpoint']):>8}")
    s = summary(res)
    print(f"growing batches 1..{s['n'] - 1}: first {s['first']} ms, last {s['last']} ms, "
          f"slope {s['slope']:+.0f} ms/batch; completion batch {s['completion']} ms; "
          f"max checkpoint {s['ckpt_mb']} MB; big transaction correct: {res['big_ok']}")


def summary(res: dict[str, Any]) -> dict[str, Any]:
    """First vs last growing batch (batch 0 excluded: it starts the Python workers)."""
    b = res["batches"]
    growing = [r["trigger_ms"] for r in b[1:-1]]
    return {"n": len(b) - 1, "first": growing[0] if growing else None,
            "last": growing[-1] if growing else None, "slope": _slope(growing),
            "completion": b[-1]["trigger_ms"] if b else None,
            "ckpt_mb": _mb(max((r["checkpoint"] or 0) for r in b) if b else None)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="size the open transaction reaches")
    ap.add_argument("--batches", type=int, default=12, help="batches it grows over")
    ap.add_argument("--image-bytes", type=int, default=1024, help="payload per image")
    ap.add_argument("--entropy", type=float, default=0.5,
                    help="random share of each payload (rest blanks): 0.5 compresses ~2x")
    ap.add_argument("--small-keys", type=int, default=4, help="keys with ordinary traffic")
    ap.add_argument("--runs", type=int, default=1, help="runs per variant, alternating A, B")
    ap.add_argument("--variants", default="AB",
                    help="any of A, B, C (C: transformWithStateInPandas with the one-blob state)")
    ap.add_argument("--work", default=str(ROOT / ".bench" / "state_api"))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one variant, print JSON
    args = ap.parse_args(argv)
    work = Path(args.work)
    input_dir = work / "input"
    expected_file = work / "expected.json"

    if args.one:
        res = run_one(args.one, input_dir, work / f"run-{args.one}",
                      json.loads(expected_file.read_text()), args.batches)
        print("RESULT " + json.dumps(res))
        return 0

    shutil.rmtree(work, ignore_errors=True)
    expected = write_input(input_dir, args.mb, args.batches, args.image_bytes,
                           args.small_keys, args.entropy)
    expected_file.write_text(json.dumps(expected))
    print(f"input: {args.batches} batches x {args.mb / args.batches:.1f} MB "
          f"({expected['images']} images of {args.image_bytes} B) + completion batch, "
          f"{args.small_keys} small keys; load before: {os.getloadavg()}")
    results: list[dict[str, Any]] = []
    for _ in range(args.runs):
        for v in args.variants:
            cmd = [sys.executable, __file__, "--one", v, "--work", str(work),
                   "--batches", str(args.batches)]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")),
                        None)
            if line is None:
                res = {"variant": v, "error": f"exit {proc.returncode}: "
                       f"{proc.stderr[-3000:]}", "load": os.getloadavg(), "wall_s": 0,
                       "spark": "?", "provider": "?", "batches": []}
            else:
                res = json.loads(line[len("RESULT "):])
            results.append(res)
            report(res, args.mb / args.batches)
    print("\nsummary (trigger ms of the growing batches; batch 0 excluded)")
    for res in results:
        if res["error"]:
            print(f"  {res['variant']}: failed")
            continue
        s = summary(res)
        print(f"  {res['variant']}: first {s['first']} last {s['last']} "
              f"slope {s['slope']:+.0f} ms/batch, completion {s['completion']} ms, "
              f"checkpoint max {s['ckpt_mb']} MB, correct {res['big_ok']}, "
              f"load {res['load'][0]:.1f}")
    (work / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
