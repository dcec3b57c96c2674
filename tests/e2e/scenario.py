"""One end-to-end scenario: its own topics, lake and checkpoint, the simulator, the real job.

Each scenario derives its settings from conf/test.yaml (broker on 127.0.0.1:19092) with fresh
topic names, so scenarios never see each other's data, and records what the simulator generated
(``tests.support.truth``) so landed rows are checked against the source, not against a
second decode of the same stream.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools import broker
from devtools.sim import Delivery, FaultPlan, Replicator
from devtools.sim.config import from_settings
from devtools.sim.live import LiveReplicator
from pipeline.config import Kafka, Settings, load_settings
from tests.support.job_run import running_job
from tests.support.truth import Sent, generate

ROOT = Path(__file__).resolve().parents[2]
TEST_CONF = ROOT / "conf" / "test.yaml"


def scenario_settings(tmp_path: Path, name: str, *, subscriptions: list[dict] | None = None,
                      gaps: dict[str, Any] | None = None,
                      layouts: bool | Collection[int] = False,
                      stream: dict[str, Any] | None = None,
                      kafka: dict[str, Any] | None = None,
                      make_topics: Callable[[Settings], Any] | None = None,
                      catalog: dict[str, Any] | None = None,
                      ) -> tuple[Settings, Path]:
    """Settings (and their YAML file, for a spark-submit'ed job) with fresh topics.

    The typed tables (conf ``layouts``) cost several Spark jobs per batch, so only scenarios
    that test them keep the layouts of conf/test.yaml (``True``: all; file numbers: those
    files' only). ``kafka``: the job's connection keys
    instead of the test broker's (a secured broker's client settings); ``make_topics``: who
    creates the fresh topics (default: the job's own settings, on the test broker);
    ``catalog``: keys of the ``catalog`` section over conf/test.yaml's (off there).
    """
    raw = yaml.safe_load(TEST_CONF.read_text())
    if not layouts:
        raw.pop("layouts", None)
    elif layouts is not True:
        raw["layouts"] = [lay for lay in raw["layouts"] if lay["fnr"] in layouts]
    prefix = f"e2e.{name}.{uuid.uuid4().hex[:6]}"
    raw["topics"] = {"outputs": {f"{prefix}.out1": "OUT1"}, "replies": f"{prefix}.replies",
                     "requests": f"{prefix}.requests", "alerts": f"{prefix}.alerts",
                     "control": f"{prefix}.control"}
    raw["stream"].update(lake_dir=str(tmp_path / "lake"), checkpoint_dir=str(tmp_path / "ck"),
                         metrics_file=str(tmp_path / "metrics.jsonl"))
    raw["stream"]["gaps"].update(gaps or {})
    raw["stream"].update(stream or {})
    raw["devtools"]["local_broker"]["data_dir"] = str(ROOT / ".run" / "test-kafka")
    if kafka is not None:
        raw["kafka"] = dict(kafka)
    raw["spark"]["jars_dir"] = str(ROOT / ".jars" / "spark")
    if subscriptions is not None:
        raw["subscriptions"] = subscriptions
    raw["catalog"].update(catalog or {})
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(raw))
    settings = load_settings(path, env={})
    (make_topics or broker.create_topics)(settings)
    return settings, path


@dataclass
class Scenario:
    """Settings plus the recorded source of truth and the live replicator answering requests."""

    settings: Settings
    conf_path: Path
    sent: list[Sent] = field(default_factory=list)
    sim: LiveReplicator | None = None
    sent_bytes: int = 0  # bytes of the messages generated up front (resends come on top)

    @classmethod
    def build(cls, tmp_path: Path, name: str, *, transactions: int, seed: int,
              faults: dict[str, int] | None = None, max_message_size: int = 4096,
              subscriptions: list[dict] | None = None,
              gaps: dict[str, Any] | None = None, layouts: bool | Collection[int] = False,
              stream: dict[str, Any] | None = None, gfft: tuple[int, ...] = (),
              sim: dict[str, Any] | None = None,
              edit: Callable[[Replicator, list[Delivery]], list[Delivery]] | None = None,
              kafka: dict[str, Any] | None = None,
              make_topics: Callable[[Settings], Any] | None = None,
              sim_kafka: dict[str, Any] | None = None,
              catalog: dict[str, Any] | None = None,
              ) -> Scenario:
        """``gfft``: files whose GFFT the simulator sends after STRT (``--gfft``); ``sim``:
        more simulator settings; ``edit``: what the transport does to the generated stream
        (lose messages, hold some back …) before the job reads it. ``kafka``/``make_topics``:
        see ``scenario_settings``; ``sim_kafka``: the simulator's own connection keys (on a
        secured broker the replicator is another principal than the job); ``catalog``: see
        ``scenario_settings``."""
        settings, path = scenario_settings(tmp_path, name, subscriptions=subscriptions,
                                           gaps=gaps, layouts=layouts, stream=stream,
                                           kafka=kafka, make_topics=make_topics,
                                           catalog=catalog)
        config = from_settings(settings).model_copy(
            update={"max_message_size": max_message_size, "c5_rate": 0.0,
                    "gfft_files": gfft, **(sim or {})})
        plan = FaultPlan(counts=faults or {})
        rep = Replicator(config, seed, faults=plan, transactions=transactions)
        deliveries, sent = generate(rep, transactions)
        if edit is not None:
            deliveries = edit(rep, deliveries)
        sim_settings = settings if sim_kafka is None else settings.model_copy(
            update={"kafka": Kafka.model_validate(sim_kafka)})
        sim = LiveReplicator(sim_settings, replicator=rep, deliveries=deliveries)
        return cls(settings, path, sent, sim, sum(len(d.value) for d in deliveries))

    def truth(self) -> set[tuple[str, str, int, int]]:
        """(subscription, destination, tsnr, record_count) of every generated transaction."""
        return {(s.subscription, d, s.tsnr, len(s.tx.records))
                for s in self.sent for d in s.destinations}

    def metrics(self) -> list[dict[str, Any]]:
        """The job's metrics JSON lines (one per batch), oldest first."""
        path = Path(self.settings.location(self.settings.stream.metrics_file))
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def table(self, spark: Any, name: str) -> Any:
        from pipeline.spark.land.tables import table_path

        return spark.read.format("delta").load(table_path(self.settings, name))

    def latest_gaps(self, spark: Any, kind: str | None = None) -> list[dict[str, Any]]:
        """Each gap's latest row; only gaps of ``kind`` (``tsnr``: transactions, ``messages``:
        URBHMSNR holes, which every lost message also makes) when given."""
        from devtools.demo import LATEST_GAPS
        from pipeline.spark.land.tables import table_path

        rows = spark.sql(LATEST_GAPS.format(path=table_path(self.settings, "gaps"))).collect()
        return [r.asDict() for r in rows if kind is None or r["kind"] == kind]

    def run(self, spark: Any, *, timeout_s: float = 420.0, settle_gaps: bool = True) -> None:
        """Start the job, send the stream, answer requests, wait until all is landed."""
        from devtools.demo import gaps_settled
        from pipeline.spark.engine.drain import await_idle

        assert self.sim is not None
        try:
            with running_job(spark, self.settings, feed=self.sim.start) as query:
                await_idle(query, timeout_s=timeout_s, quiet_batches=2,
                           until=lambda: self.sim.streamed.is_set() and (
                               not settle_gaps or gaps_settled(self.settings)))
        finally:
            self.sim.stop()
        assert self.sim.error is None, self.sim.error


#: Two subscriptions on one destination, one per form the replicator sends: EBCDIC text with
#: big-endian binary (COLOR) and ASCII with little-endian (EMPLOYEE).
BOTH_FORMS = [{"name": "COLOR", "destinations": ["OUT1"], "files": [4], "ebcdic": True},
              {"name": "EMPLOYEE", "destinations": ["OUT1"], "files": [11], "ebcdic": False}]


# -- a job in another process (spark-submit'ed): watched through its checkpoint and lake -------

def commits(checkpoint: Path) -> int:
    """Batches the job committed (its checkpoint's commit files)."""
    folder = checkpoint / "commits"
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0


def landed(lake: Path) -> int:
    """Rows of the lake's transactions table, read without Spark (0 before it exists, also
    while the job is creating it: a _delta_log folder with no commit in it yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    path = lake / "transactions"
    if not (path / "_delta_log").exists():
        return 0
    try:
        return DeltaTable(str(path)).to_pyarrow_table(columns=["tsnr"]).num_rows
    except TableNotFoundError:
        return 0


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    """Poll ``predicate``; on timeout fail with the end of the job's log (why it is stuck)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:]
            raise TimeoutError(f"{what} not reached in {timeout_s:.0f}s; job log:\n{tail}")
        time.sleep(0.5)
