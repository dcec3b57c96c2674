"""Shared pieces of the fault tests: settings, a recorded paced load, the job as a process,
Spark-free lake reads and the one exactly-once check every fault test ends with.

Why these exist beside tests/e2e: the fault tests run the job the way it is deployed
(``jobs/stream.py`` in its own process group) and read the lake with ``deltalake`` while the job
writes, so the checks never depend on a Spark session that saw the same faults. Truth always
comes from what the simulator generated, never from a second decode of the stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools.sim import FaultPlan, Replicator
from devtools.sim.config import from_settings
from devtools.sim.live import LiveReplicator
from pipeline.config import Settings, load_settings
from pipeline.objectstore import S3Access
from tests.support.truth import Sent

ROOT = Path(__file__).resolve().parents[2]
TEST_CONF = ROOT / "conf" / "test.yaml"

COLOR_EBCDIC = {"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True}
EMPLOYEE_ASCII = {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}
BOTH_FORMS = [COLOR_EBCDIC, EMPLOYEE_ASCII]

# (subscription, destination, epoch, tsnr, record_count): one landed transaction
TxKey = tuple[str, str, int, int, int]


# -- settings ---------------------------------------------------------------------------------

def fault_settings(tmp_path: Path, name: str, *, subscriptions: list[dict] | None = None,
                   gaps: dict[str, Any] | None = None, stream: dict[str, Any] | None = None,
                   broker_ports: tuple[int, int] | None = None,
                   create_topics: bool = True, layouts: bool = False,
                   sections: dict[str, Any] | None = None) -> tuple[Settings, Path]:
    """Settings (and their YAML file, for the job process) with fresh topics and folders.

    ``broker_ports`` gives the test its own broker (port, controller port) with its data
    under ``tmp_path``: a test that stops a broker must never stop the one the others share.
    ``layouts`` keeps conf/test.yaml's typed tables: their MERGEs are most of a batch's time
    here (a first batch took 86 s of a shared machine), so only a test that checks them pays.
    ``sections``: whole conf sections to set (``alertmanager``, ``maintenance`` …).
    """
    from devtools import broker

    raw = yaml.safe_load(TEST_CONF.read_text())
    if not layouts:
        raw.pop("layouts", None)
    prefix = f"faults.{name}.{uuid.uuid4().hex[:6]}"
    raw["base_dir"] = str(ROOT)
    raw["topics"] = {"outputs": {f"{prefix}.out1": "OUT1"}, "replies": f"{prefix}.replies",
                     "requests": f"{prefix}.requests", "alerts": f"{prefix}.alerts",
                     "control": f"{prefix}.control"}
    raw["stream"].update(lake_dir=str(tmp_path / "lake"), checkpoint_dir=str(tmp_path / "ck"),
                         metrics_file=str(tmp_path / "metrics.jsonl"), **(stream or {}))
    raw["stream"]["gaps"].update(gaps or {})
    raw["spark"]["jars_dir"] = str(ROOT / ".jars" / "spark")
    lb = raw["devtools"]["local_broker"]
    if broker_ports is None:
        lb["data_dir"] = str(ROOT / ".run" / "test-kafka")
    else:
        port, controller = broker_ports
        raw["kafka"]["bootstrap_servers"] = f"127.0.0.1:{port}"
        lb.update(port=port, controller_port=controller, data_dir=str(tmp_path / "kafka"))
    raw["subscriptions"] = subscriptions or BOTH_FORMS
    raw.update(sections or {})
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(raw))
    settings = load_settings(path, env={})
    if create_topics:
        broker.create_topics(settings)
    return settings, path


def sim_config(settings: Settings, max_message_size: int, *, big_buffer: bool = False) -> Any:
    """The simulator's view of the job's conf; no C5 noise so status rows stay countable.
    ``big_buffer``: a resend buffer that keeps the whole run (the default one is circular
    and small, as real ones are: early losses are answered TRSP 131/35)."""
    config = from_settings(settings).model_copy(
        update={"max_message_size": max_message_size, "c5_rate": 0.0})
    if big_buffer:
        buffers = tuple(b.model_copy(update={"size": 64 * 1024 * 1024})
                        for b in config.resend_buffers)
        config = config.model_copy(update={"resend_buffers": buffers})
    return config


# -- what the simulator did --------------------------------------------------------------------

@dataclass
class FaultLog:
    """Faults as they were injected: which step each hit, and every corrupted message."""

    hits: list[tuple[str, int]] = field(default_factory=list)
    corrupted: list[tuple[bytes, bytes]] = field(default_factory=list)  # (original, damaged)

    def steps(self, kind: str) -> list[int]:
        return [i for k, i in self.hits if k == kind]


def watch(rep: Replicator) -> FaultLog:
    """Record the faults ``rep`` injects (wrapping its schedule, not changing it)."""
    log = FaultLog()
    schedule = rep.faults
    hits, corrupt = schedule.hits, schedule.corrupt

    def recording_hits(kind: str, index: int) -> bool:
        hit = hits(kind, index)
        if hit:
            log.hits.append((kind, index))
        return hit

    def recording_corrupt(message: bytes) -> bytes:
        damaged = corrupt(message)
        log.corrupted.append((message, damaged))
        return damaged

    schedule.hits = recording_hits  # type: ignore[method-assign]
    schedule.corrupt = recording_corrupt  # type: ignore[method-assign]
    return log


class PacedLoad:
    """The live replicator loading the topic at a steady rate until told to finish.

    Wraps ``Replicator.step`` to record each generated transaction (the source of truth) and,
    once :meth:`finish` is called, to end the load: ``drive`` treats KeyboardInterrupt from a
    step as "stop now" (flush, TERM), after which the LiveReplicator keeps answering requests.
    That lets a test keep the load running for as long as its faults take on a slow machine
    instead of guessing a transaction count.
    """

    def __init__(self, settings: Settings, *, seed: int, rate: float,
                 max_message_size: int = 1200, faults: FaultPlan | None = None,
                 cap: int = 100_000) -> None:
        self.rep = Replicator(sim_config(settings, max_message_size), seed, faults=faults,
                              transactions=cap)
        self.faults = watch(self.rep)
        self.sent: list[Sent] = []
        self._finish = threading.Event()
        made: list[Any] = []
        next_tx, step = self.rep.generator.next_transaction, self.rep.step

        def recording_next(sub: Any, clock: Any) -> Any:
            made.append(next_tx(sub, clock))
            return made[-1]

        def recording_step() -> list[Any]:
            if self._finish.is_set():
                raise KeyboardInterrupt  # drive(): flush, TERM, then answer requests
            out = step()
            sub = self.rep.config.subscription(made[-1].subscription)
            assert sub is not None
            self.sent.append(Sent(sub.name, sub.destinations, self.rep.states[sub.name].tsnr,
                                  made[-1]))
            return out

        self.rep.generator.next_transaction = recording_next  # type: ignore[method-assign]
        self.rep.step = recording_step  # type: ignore[method-assign]
        self.sim = LiveReplicator(settings, replicator=self.rep, transactions=cap, rate=rate)

    @property
    def loading(self) -> bool:
        return not self.sim.streamed.is_set()

    def start(self) -> PacedLoad:
        self.sim.start()
        return self

    def finish(self, timeout_s: float = 60.0) -> None:
        """End the load (TERM sent) and wait until every message is handed to Kafka."""
        self._finish.set()
        if not self.sim.streamed.wait(timeout_s):
            raise TimeoutError(f"the simulator did not finish its load in {timeout_s:.0f}s")
        assert self.sim.error is None, f"simulator failed: {self.sim.error!r}"

    def stop(self) -> None:
        self._finish.set()
        self.sim.stop()


def with_epochs(sent: Iterable[Sent]) -> list[tuple[int, Sent]]:
    """Each generated transaction with its epoch, derived from the source alone: the
    replicator's STRT at the start begins epoch 1 (every run here starts with one), and a
    subscription's epoch goes up each time its tsnr does not increase (numbering restarted)."""
    epochs: dict[str, int] = defaultdict(lambda: 1)
    last: dict[str, int] = {}
    out: list[tuple[int, Sent]] = []
    for s in sent:
        if s.subscription in last and s.tsnr <= last[s.subscription]:
            epochs[s.subscription] += 1
        last[s.subscription] = s.tsnr
        out.append((epochs[s.subscription], s))
    return out


def expected_transactions(sent: Iterable[Sent], *, lost: Iterable[tuple[str, int]] = ()
                          ) -> set[TxKey]:
    """What must land: every generated transaction with its epoch, minus ``lost``
    (subscription, tsnr) pairs."""
    gone = set(lost)
    return {(s.subscription, d, epoch, s.tsnr, len(s.tx.records))
            for epoch, s in with_epochs(sent) if (s.subscription, s.tsnr) not in gone
            for d in s.destinations}


# -- the job as a process ----------------------------------------------------------------------

class Job:
    """``jobs/stream.py`` in its own process group (python + its Spark JVM), like spark-submit.

    Every start appends to one log file, so a failure message can show what the job said.
    """

    def __init__(self, conf: Path, log: Path, trigger: str = "1 second") -> None:
        self.conf, self.log, self.trigger = conf, log, trigger
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> Job:
        assert not self.alive, "the job is already running"
        with self.log.open("ab") as out:
            out.write(f"\n===== start {self.starts + 1} at {time.strftime('%X')} =====\n"
                      .encode())
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "jobs" / "stream.py"), "--conf-file",
                 str(self.conf), "--trigger", self.trigger],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.starts += 1
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill9(self) -> None:
        """SIGKILL the whole process group: the driver and the JVM die mid-whatever."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM (stop at a batch boundary, as an operator would); the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"the job ignored SIGTERM for {timeout_s:.0f}s\n"
                                 f"{self.tail()}") from None

    def cleanup(self) -> None:
        """Whatever happened in the test: no job process of ours survives it."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def tail(self, lines: int = 40) -> str:
        """The end of the job log without py4j chatter: what a reader needs on a failure."""
        if not self.log.exists():
            return "(no job log)"
        text = self.log.read_text(errors="replace").splitlines()
        useful = [t for t in text if "py4j" not in t]
        return f"--- job log tail ({self.log}) ---\n" + "\n".join(useful[-lines:])


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, *,
             job: Job | None = None, poll_s: float = 0.5, fail_on_exit: bool = True) -> float:
    """Poll until ``predicate()``; fail with the job log tail on timeout or if the job died
    (unless ``fail_on_exit`` is False: the predicate restarts it). Returns the seconds waited."""
    started = time.monotonic()
    while not predicate():
        if fail_on_exit and job is not None and job.proc is not None and not job.alive:
            raise AssertionError(f"job exited with {job.exit_code} while waiting for {what}\n"
                                 f"{job.tail()}")
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not reached in {timeout_s:.0f}s\n"
                                 f"{job.tail() if job else ''}")
        time.sleep(poll_s)
    return time.monotonic() - started


def batch_ids(checkpoint: Path | str, folder: str, store: S3Access | None = None) -> list[int]:
    """Batch ids Spark wrote to ``offsets`` (batch planned) or ``commits`` (batch done).
    ``store``: the checkpoint is an ``s3a://`` location on that object store."""
    if store is not None:
        from pyarrow.fs import FileSelector

        from pipeline.objectstore import pyarrow_path

        where = FileSelector(pyarrow_path(f"{checkpoint}/{folder}"), allow_not_found=True)
        return sorted(int(i.base_name) for i in store.filesystem().get_file_info(where)
                      if i.base_name.isdigit())
    path = Path(checkpoint) / folder
    return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit()) \
        if path.exists() else []


def last_batch(checkpoint: Path | str, folder: str, store: S3Access | None = None) -> int:
    ids = batch_ids(checkpoint, folder, store)
    return ids[-1] if ids else -1


# -- reading the lake without Spark -----------------------------------------------------------

def delta_table(settings: Settings, name: str) -> Any | None:
    """The ``deltalake`` table ``name`` of the lake (None before the job created it); on an
    ``s3a://`` lake read through ``object_store`` with the environment's credentials."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from pipeline.objectstore import access, delta_uri, is_object_store

    lake = settings.location(settings.stream.lake_dir).rstrip("/")
    options = None
    if is_object_store(lake):
        uri, options = delta_uri(f"{lake}/{name}"), access(settings).storage_options()
    else:
        uri = str(Path(lake) / name)
        if not any((Path(uri) / "_delta_log").glob("*.json")):
            return None
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:  # the job is creating it right now
        return None


def read_table(settings: Settings, name: str, columns: list[str] | None = None
               ) -> list[dict[str, Any]]:
    """A Delta table's rows (empty before the job created it)."""
    table = delta_table(settings, name)
    return [] if table is None else table.to_pyarrow_table(columns=columns).to_pylist()


def live(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the source's transactions: not those of initial-state pseudo-transactions
    (tsnr 0), the answers to INST requests (the job's after a resend, urbpipe reconcile's)."""
    return [r for r in rows if r["tsnr"] != 0]


def landed_count(settings: Settings) -> int:
    """Transactions of the source landed (``live``)."""
    return len(live(read_table(settings, "transactions", ["tsnr"])))


def latest_gaps(settings: Settings, kind: str | None = "tsnr") -> list[dict[str, Any]]:
    """Each gap's current row: the one with the greatest (batch_id, seq); of ``kind`` (tsnr
    gaps by default; ``messages``: holes in URBHMSNR; None: both)."""
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in read_table(settings, "gaps"):
        if kind is not None and row.get("kind", "tsnr") != kind:
            continue
        key = (row["destination"], row["subscription"], row["gap_id"])
        if key not in best or (row["batch_id"], row["seq"]) > (best[key]["batch_id"],
                                                                 best[key]["seq"]):
            best[key] = row
    return list(best.values())


# -- the check every fault test ends with ------------------------------------------------------

def _dupes(keys: list[tuple]) -> list[tuple]:
    return sorted(k for k, n in Counter(keys).items() if n > 1)


def _show(keys: Iterable[tuple], limit: int = 12) -> str:
    keys = sorted(keys)
    more = f" … (+{len(keys) - limit})" if len(keys) > limit else ""
    return ", ".join(map(str, keys[:limit])) + more


def assert_exactly_once(settings: Settings, sent: list[Sent], *,
                        lost: Iterable[tuple[str, int]] = (), payloads: bool = True) -> None:
    """0 lost and 0 duplicated transactions, and their records and images exactly.

    Compares (subscription, destination, epoch, tsnr, record_count) with what the simulator
    generated, checks every table key is unique, and that records and images are the source's
    (a resent transaction has no after images: the resend buffer never keeps them).
    ``lost`` names (subscription, tsnr) that must NOT land (a gap nobody can close).
    Initial-state pseudo-transactions are not the source's (``live``).
    """
    gone = set(lost)
    txs = live(read_table(settings, "transactions"))
    keys = [(t["subscription"], t["destination"], t["epoch"], t["tsnr"]) for t in txs]
    assert not _dupes(keys), f"transactions landed twice: {_show(_dupes(keys))}"
    landed = {(t["subscription"], t["destination"], t["epoch"], t["tsnr"], t["record_count"])
              for t in txs}
    expected = expected_transactions(sent, lost=gone)
    missing, extra = expected - landed, landed - expected
    assert not missing and not extra, (
        f"{len(missing)} transaction(s) lost: {_show(missing)}; "
        f"{len(extra)} unexpected: {_show(extra)} (of {len(expected)} expected)")

    resent = {(t["subscription"], t["epoch"], t["tsnr"]) for t in txs if t["origin"] == "resend"}
    source = {(s.subscription, epoch, s.tsnr): s for epoch, s in with_epochs(sent)
              if (s.subscription, s.tsnr) not in gone}

    records = live(read_table(settings, "records"))
    rkeys = [(r["subscription"], r["destination"], r["epoch"], r["tsnr"], r["rsnr"])
             for r in records]
    assert not _dupes(rkeys), f"records landed twice: {_show(_dupes(rkeys))}"
    got_records = {(r["subscription"], r["epoch"], r["tsnr"], r["rsnr"], r["fnr"], r["isn"],
                    r["type"]) for r in records}
    want_records = {(*k, *rec) for k, s in source.items() for rec in s.records()}
    assert got_records == want_records, (
        f"records differ: missing {_show(want_records - got_records)}; "
        f"unexpected {_show(got_records - want_records)}")

    images = live(read_table(settings, "images"))
    ikeys = [(i["subscription"], i["destination"], i["epoch"], i["tsnr"], i["rsnr"], i["dsnr"])
             for i in images]
    assert not _dupes(ikeys), f"images landed twice: {_show(_dupes(ikeys))}"

    def image(k: tuple, rsnr: int, dsnr: int, typ: str, payload: bytes) -> tuple:
        return (*k, rsnr, dsnr, typ, payload if payloads else b"")

    got_images = {image((i["subscription"], i["epoch"], i["tsnr"]), i["rsnr"], i["dsnr"],
                        i["image_type"], bytes(i["payload"] or b"")) for i in images}
    want_images = {image(k, *img) for k, s in source.items()
                   for img in s.images(resent=k in resent)}
    assert got_images == want_images, (
        f"images differ: {len(want_images - got_images)} missing, "
        f"{len(got_images - want_images)} unexpected, e.g. "
        f"{_show([i[:6] for i in want_images ^ got_images], 5)}")


# -- Kafka topics the job writes ----------------------------------------------------------------

def read_topic(settings: Settings, topic: str, *, until: Callable[[list[Any]], bool],
               timeout_s: float = 60.0, as_json: bool = True) -> list[Any]:
    """Every message on ``topic`` from the beginning, until ``until(messages)`` or timeout
    (then whatever arrived: the caller's assertion says what was missing)."""
    from confluent_kafka import Consumer

    consumer = Consumer({**settings.kafka.confluent(), "group.id": f"faults-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None:
                    out.append(json.loads(msg.value()) if as_json else msg.value())
            if until(out):
                break
    finally:
        consumer.close()
    return out
