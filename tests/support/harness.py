"""An in-memory stand-in for Kafka + Spark around the real decode stage and state machine.

Why: the streaming job is thin glue around three engine-free pieces (the simulator's bytes,
``RecordDecoder`` and ``reassembly.step``). Driving them the way Kafka and Spark would — with
partitions, offsets, micro-batches, shuffled rows per group, state kept only as bytes between
batches, processing-time timers and the TRAN request loop back to the replicator — tests the
whole data path in seconds, without a JVM.

What it imitates, and how:
- Kafka: a key always lands in one partition (``partition_of``: a stable hash of the key mod
  P; no key: partition 0 — the job requires one partition per topic, so P is 1 unless a test
  scrambles order on purpose), offsets count per (topic, partition) from 0, a batch reads
  what was appended and is visible: a delivery the connector holds (``Delivery.delay_ms``, a
  stall) becomes visible that much processing time later, and so does everything after it
  on its topic.
- Spark decode stage: ``RecordDecoder.rows`` per record (one row per key of its elements) and
  ``RecordDecoder.batch_rows`` per batch (URBHMSNR runs, destination ticks), then an Arrow
  table with the job's schema, handed over as pandas; the state function decodes each record
  again and keeps its key's elements (``split_rows``), as the job does.
- applyInPandasWithState: one call per (destination, subscription) key with data, rows in a
  deterministic shuffled order (Spark keeps none), split into frames of ``frame_rows``; keys
  without data but with an expired timeout (timeout < batch time) are called with no rows;
  state is only ever kept as ``KeyState.to_bytes`` output; the timeout is set from
  ``next_timeout_ms`` (or cleared) on every call.
- foreachBatch: rows per table collected; TRAN and INST requests built by the codec and
  answered by the simulator, whose deliveries are appended to "Kafka" for later batches (the
  closed loops and the typed tables' convergence after a resend).
"""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from devtools.sim import Delivery, Replicator, SimConfig
from pipeline.reassembly import Event, KeyState, ReassemblyConfig, events_to_rows, step
from pipeline.reassembly.config import inst_reply_routes
from pipeline.reassembly.outbound import RequestForm, request_messages
from pipeline.reassembly.routing import Covered
from pipeline.reassembly.tables import TABLES, ms_to_datetime
from pipeline.spark.engine.decode_stage import ARROW_SCHEMA, RecordDecoder
from pipeline.spark.engine.state_stage import key_step, split_frames

Key = tuple[str, str]
Tables = dict[str, list[dict[str, Any]]]

START_MS = 1_750_000_000_000
REPLY_DESTINATION = "REPLY"
REQUEST_TOKEN = "URBPIPE"
CODEPAGE = "cp037"
CONTROL_TOPIC = "urb.control"


def default_reassembly(**overrides: Any) -> ReassemblyConfig:
    """The machine as conf/local.yaml configures it (reply destination, token, retries)."""
    base: dict[str, Any] = {"reply_destination": REPLY_DESTINATION,
                            "request_token": REQUEST_TOKEN, "retry_initial_ms": 10_000,
                            "max_retries": 3}
    return ReassemblyConfig(**{**base, **overrides})


def partition_of(key: bytes | None, partitions: int) -> int:
    """Kafka's default partitioner hashes the key (murmur2); any stable hash keeps one key in
    one partition. Without a key records spread over the partitions (round robin here)."""
    if key is None:
        return -1
    return zlib.crc32(key) % partitions


def decoder_for(config: SimConfig, codepage: str = CODEPAGE,
                initial_state_routes: Mapping[str, str] | None = None,
                reassembly: ReassemblyConfig | None = None,
                native_scan: bool = True) -> RecordDecoder:
    """The decoder the job builds from conf (pipeline/spark/engine/query.py:record_decoder);
    ``initial_state_routes``: initial-state name -> subscription (conf ``initial_state``);
    ``reassembly``: routes the replies to the job's own INST requests to the asking key."""
    destinations = {d.topic: d.name for d in config.destinations}
    homes = {s.name: s.destinations[0] for s in config.subscriptions if len(s.destinations) == 1}
    inst = (inst_reply_routes(reassembly.initial_states, reassembly.request_token)
            if reassembly is not None else None)
    covered: dict[str, list[Covered]] = {}
    for sub in config.subscriptions:
        for d in sub.destinations:
            covered.setdefault(d, []).append(Covered(sub.name, frozenset(sub.file_keys())))
    return RecordDecoder(destinations, config.destinations[0].name, codepage, homes,
                         initial_state_routes, inst_routes=inst, covered=covered,
                         control_topic=CONTROL_TOPIC, native_scan=native_scan)


@dataclass(frozen=True)
class KafkaRecord:
    """One record as Spark's Kafka source hands it to the decode stage."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    visible_ms: int = 0  # processing time from which a batch can read it


class KafkaLog:
    """Topics of P partitions each: appends records, numbering offsets per partition."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._next: dict[tuple[str, int], int] = defaultdict(int)
        self._held: dict[str, int] = defaultdict(int)  # topic -> visible from (a stall)
        self._spread = 0
        self.records: list[KafkaRecord] = []

    def append(self, delivery: Delivery, now_ms: int = 0) -> KafkaRecord:
        key = delivery.key if delivery.key is None or isinstance(delivery.key, bytes) \
            else str(delivery.key).encode("latin-1")
        part = partition_of(key, self.partitions)
        if part < 0:
            part, self._spread = self._spread % self.partitions, self._spread + 1
        offset = self._next[(delivery.topic, part)]
        self._next[(delivery.topic, part)] = offset + 1
        delay = getattr(delivery, "delay_ms", 0)
        if delay:
            self._held[delivery.topic] = max(self._held[delivery.topic], now_ms + delay)
        record = KafkaRecord(delivery.topic, part, offset, key, delivery.value,
                             self._held[delivery.topic])
        self.records.append(record)
        return record


@dataclass(frozen=True)
class Checkpoint:
    """What Spark keeps between batches for the stateful operator: state bytes and timeouts."""

    states: Mapping[Key, bytes] = field(default_factory=dict)
    timeouts: Mapping[Key, int] = field(default_factory=dict)


@dataclass
class BatchOutput:
    """One micro-batch's result: its rows per table, the raw events, the next checkpoint."""

    batch_id: int
    now_ms: int
    tables: Tables
    events: list[Event]
    checkpoint: Checkpoint
    calls: list[Key]


def message_rows(decoder: RecordDecoder, records: Sequence[KafkaRecord]) -> list[dict[str, Any]]:
    """The decode stage: every record becomes one row per key (error rows included), and
    the batch adds its message-number runs and destination ticks."""
    rows: list[dict[str, Any]] = []
    for r in records:
        rows.extend(decoder.rows(r.topic, r.partition, r.offset, r.key, r.value))
    ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
    rows.extend(decoder.batch_rows([(r.topic, r.partition, r.offset, r.value)
                                    for r in ordered]))
    return rows


def group_frames(rows: list[dict[str, Any]], batch_id: int, shuffle_seed: int,
                 frame_rows: int) -> dict[Key, list[pd.DataFrame]]:
    """Rows per (destination, subscription), shuffled, as the pandas frames Spark hands over.

    Going through Arrow with the job's schema checks what mapInArrow would reject and gives the
    exact pandas shapes (bytes, None for nulls).
    """
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["destination"], row["subscription"])].append(row)
    frames: dict[Key, list[pd.DataFrame]] = {}
    for key in sorted(groups):
        group = groups[key]
        random.Random(f"{shuffle_seed}/{batch_id}/{key}").shuffle(group)
        chunks = [group[i:i + frame_rows] for i in range(0, len(group), frame_rows)]
        frames[key] = [pa.Table.from_pylist(c, schema=ARROW_SCHEMA).to_pandas() for c in chunks]
    return frames


def call_key(blob: bytes | None, frames: Sequence[pd.DataFrame], now_ms: int,
             config: ReassemblyConfig, key: Key, decoder: RecordDecoder, fast: bool = False,
             ) -> tuple[bytes | None, int | None, Tables, list[Event]]:
    """One state-function call, as pipeline/spark/engine/state_stage.py makes it (``fast``:
    with the fast path, ``key_step``; else ``split_frames`` and ``step`` alone)."""
    current = KeyState.from_bytes(blob) if blob is not None else None
    landed = None
    if fast:
        done = key_step(current, frames, now_ms, config, key, decoder)
        result, landed, rejected = done.result, done.landed, done.rejected
    else:
        elements, rejected = split_frames(frames, decoder)
        result = step(current, elements, now_ms, config, key)
    tables = events_to_rows(result.events, now_ms, config.tod_offset_us, landed)
    for row in rejected:
        row["quarantined_at"] = ms_to_datetime(now_ms)
    tables["quarantine"].extend(rejected)
    new_blob = result.state.to_bytes() if result.state is not None else None
    timeout = result.next_timeout_ms if new_blob is not None else None
    return new_blob, timeout, tables, result.events


def process_batch(checkpoint: Checkpoint, records: Sequence[KafkaRecord], now_ms: int,
                  batch_id: int, config: ReassemblyConfig, decoder: RecordDecoder, *,
                  shuffle_seed: int = 0, frame_rows: int = 10_000,
                  fast: bool = False) -> BatchOutput:
    """A pure function of its inputs, like a Spark micro-batch replayed from its offset log."""
    frames = group_frames(message_rows(decoder, records), batch_id, shuffle_seed, frame_rows)
    expired = {k for k, t in checkpoint.timeouts.items() if t < now_ms and k not in frames}
    states, timeouts = dict(checkpoint.states), dict(checkpoint.timeouts)
    tables: Tables = {name: [] for name in TABLES}
    events: list[Event] = []
    calls = sorted(set(frames) | expired)
    for key in calls:
        blob, timeout, out, evs = call_key(states.get(key), frames.get(key, []), now_ms,
                                           config, key, decoder, fast)
        _put(states, key, blob)
        _put(timeouts, key, timeout)
        for name, rows in out.items():
            tables.setdefault(name, []).extend(rows)
        events.extend(evs)
    return BatchOutput(batch_id, now_ms, tables, events, Checkpoint(states, timeouts), calls)


def _put(mapping: dict[Key, Any], key: Key, value: Any) -> None:
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value


def request_bytes(rows: Sequence[Mapping[str, Any]], config: ReassemblyConfig) -> list[bytes]:
    """The request messages for a batch's ``requests`` rows, as pipeline/spark/land/kafka_out.py
    sends them (``pipeline.reassembly.outbound``: one INST message per request)."""
    form = RequestForm(config.reply_destination, config.request_token)
    out = []
    for msg in request_messages(rows, form):
        assert msg.value is not None, msg.error
        out.append(msg.value)
    return out


class Harness:
    """Kafka + the streaming job in memory, closed over the simulator's request answering."""

    def __init__(self, replicator: Replicator, *, partitions: int = 1,
                 config: ReassemblyConfig | None = None, shuffle_seed: int = 0,
                 start_ms: int = START_MS, interval_ms: int = 1_000,
                 frame_rows: int = 10_000, answer_requests: bool = True,
                 initial_state_routes: Mapping[str, str] | None = None,
                 fast: bool = False) -> None:
        self.replicator = replicator
        self.fast = fast  # the state stage's fast path (pipeline.reassembly.fast)
        # the job configured for the replicator's TOD clock, as conf/*.yaml is for the sim's
        self.config = config or default_reassembly(tod_offset_us=replicator.config.tod_offset_us)
        self.decoder = decoder_for(replicator.config, initial_state_routes=initial_state_routes,
                                   reassembly=self.config)
        self.kafka = KafkaLog(partitions)
        self.shuffle_seed, self.frame_rows = shuffle_seed, frame_rows
        self.interval_ms, self.now_ms = interval_ms, start_ms
        self.answer_requests = answer_requests
        self.unread: list[KafkaRecord] = []  # appended, not yet consumed, in log order
        self.checkpoint = Checkpoint()
        self.batches: list[BatchOutput] = []
        self.tables: Tables = {name: [] for name in TABLES}
        self.requests_sent: list[bytes] = []

    # -- input --------------------------------------------------------------------------------
    def feed(self, deliveries: Iterable[Delivery]) -> list[KafkaRecord]:
        """Produce deliveries to "Kafka" (readable by the next batch, a stalled one later)."""
        records = [self.kafka.append(d, self.now_ms) for d in deliveries]
        self.unread.extend(records)
        return records

    @property
    def pending(self) -> int:
        return len(self.unread)

    # -- batches ------------------------------------------------------------------------------
    def batch(self, count: int | None = None) -> BatchOutput:
        """Run one micro-batch over the next ``count`` visible records (all when None)."""
        self.now_ms += self.interval_ms
        visible = [r for r in self.unread if r.visible_ms <= self.now_ms]
        records = visible if count is None else visible[:count]
        taken = {id(r) for r in records}
        self.unread = [r for r in self.unread if id(r) not in taken]
        out = process_batch(self.checkpoint, records, self.now_ms, len(self.batches),
                            self.config, self.decoder, shuffle_seed=self.shuffle_seed,
                            frame_rows=self.frame_rows, fast=self.fast)
        self.commit(out)
        return out

    def commit(self, out: BatchOutput) -> None:
        """foreachBatch: keep the rows, send the requests, then checkpoint the batch."""
        self.batches.append(out)
        for name, rows in out.tables.items():
            self.tables.setdefault(name, []).extend(rows)
        for request in request_bytes(out.tables.get("requests", []), self.config):
            self.requests_sent.append(request)
            if self.answer_requests:
                self.feed(self.replicator.answer(request))
        self.checkpoint = out.checkpoint

    def run(self, cuts: Iterable[int] = (), max_batches: int = 500) -> None:
        """Batches of the given sizes first, then everything else until nothing is left."""
        for size in cuts:
            if self.pending:
                self.batch(size)
        self.drain(max_batches)

    def drain(self, max_batches: int = 500) -> None:
        """Batches until no input is pending and no timer is armed (idle time is skipped)."""
        for _ in range(max_batches):
            if any(r.visible_ms <= self.now_ms + self.interval_ms for r in self.unread):
                self.batch()
            elif self.checkpoint.timeouts or self.unread:
                # Empty batches before the earliest timeout (or a stalled record becoming
                # visible) change nothing: jump past it.
                due = list(self.checkpoint.timeouts.values()) + [
                    r.visible_ms - self.interval_ms for r in self.unread]
                self.now_ms = max(self.now_ms, min(due))
                self.batch()
            else:
                return
        raise AssertionError(f"stream did not settle within {max_batches} batches")

    # -- views --------------------------------------------------------------------------------
    def rows(self, table: str, **match: Any) -> list[dict[str, Any]]:
        """Collected rows of a table whose columns equal ``match``."""
        return [r for r in self.tables.get(table, [])
                if all(r.get(k) == v for k, v in match.items())]

    def state(self, key: Key) -> KeyState | None:
        blob = self.checkpoint.states.get(key)
        return KeyState.from_bytes(blob) if blob is not None else None
