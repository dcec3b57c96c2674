"""State lanes: which task of the stateful step each configured (destination, subscription) gets.

Why: the stateful step is partitioned by Spark's hash of its grouping key (Murmur3, modulo
``stream.shuffle_partitions``), and one task runs one partition's keys one after the other.
With few subscriptions that is a coin toss per pair of keys: in the benchmark's conf the two
busy subscriptions (OUT1/COLOR, OUT1/EMPLOYEE) hash to the same partition for every partition
count from 2 to 6, so without lanes the whole reassembly runs on one core of two (decision
0006). Reassembly is sequential per key, so the only parallelism is between keys.

How: the key is grouped as (``lane``, destination, subscription). ``lane`` is a small integer
chosen per configured key so that the hash of the whole grouping key lands the configured keys
on the partitions round-robin, in conf order (:func:`plan_lanes`; the hash is computed by Spark
itself, :func:`spark_partitions`, so it is the partitioner's own answer). Keys the conf does not
name (destination-wide status, replies for unknown subscriptions) get lane 0.

A key's lane is part of its state key, so it must never change: the plan is made once, when the
checkpoint is created, and kept in the checkpoint folder (``lanes.json``, next to Spark's own
``metadata``). Subscriptions added to the conf later keep lane 0 (hash placement), because
their key may already have state under lane 0. A checkpoint whose state is keyed without the
lane: :func:`checkpoint_lanes` refuses it with a clear message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Key = tuple[str, str]  # (destination, subscription)
LANES_FILE = "lanes.json"
#: Candidate lanes per key: with n partitions a lane hits a given one with probability 1/n,
#: so 512 candidates miss it with probability (1 - 1/n)^512 (about 1e-28 for n = 8).
MAX_LANE = 512


class LaneError(RuntimeError):
    """The checkpoint's state was keyed before lanes existed (or lanes.json is unreadable)."""


def configured_keys(settings: Settings) -> list[Key]:
    """Every (destination, subscription) the conf names, in conf order, once."""
    keys = [(dest, sub.name) for sub in settings.subscriptions for dest in sub.destinations]
    return list(dict.fromkeys(keys))


def plan_lanes(keys: Sequence[Key], partitions: int,
               partition_of: Callable[[int, Key], int]) -> dict[Key, int]:
    """Lane per key: the smallest lane that puts the i-th key on partition i mod n, where
    ``partition_of(lane, key)`` is the partitioner's answer. Pure, so it is tested without
    Spark; raises when no lane below MAX_LANE reaches a partition (a broken partitioner)."""
    lanes: dict[Key, int] = {}
    for i, key in enumerate(keys):
        target = i % partitions
        lane = next((c for c in range(MAX_LANE) if partition_of(c, key) == target), None)
        if lane is None:
            raise LaneError(f"no lane below {MAX_LANE} places {key} on partition {target}")
        lanes[key] = lane
    return lanes


def spark_partitions(spark: SparkSession, keys: Sequence[Key], partitions: int
                     ) -> dict[tuple[int, Key], int]:
    """Partition of every (lane, key) for lane < MAX_LANE, as the stateful step's exchange
    computes it: pmod(murmur3(lane int, destination, subscription), n)."""
    if not keys:
        return {}
    frame = (spark.createDataFrame(list(keys), "destination string, subscription string")
             .crossJoin(spark.range(MAX_LANE).selectExpr("cast(id as int) as lane"))
             .selectExpr("lane", "destination", "subscription",
                         f"pmod(hash(lane, destination, subscription), {int(partitions)}) as p"))
    return {(r["lane"], (r["destination"], r["subscription"])): int(r["p"])
            for r in frame.collect()}


def to_json(lanes: Mapping[Key, int], partitions: int) -> str:
    return json.dumps({"partitions": partitions,
                       "lanes": [[d, s, lane] for (d, s), lane in lanes.items()]})


def from_json(text: str) -> dict[Key, int]:
    data = json.loads(text)
    return {(str(d), str(s)): int(lane) for d, s, lane in data["lanes"]}


def checkpoint_lanes(spark: SparkSession, settings: Settings, checkpoint: str) -> dict[Key, int]:
    """The checkpoint's lanes: read back, or planned and written on the checkpoint's first
    start. Uses Hadoop's FileSystem, so it works on any checkpoint store."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    root = checkpoint.rstrip("/")
    path = jvm.org.apache.hadoop.fs.Path(f"{root}/{LANES_FILE}")
    fs = path.getFileSystem(conf)
    if fs.exists(path):
        stream = fs.open(path)
        try:
            return from_json(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        except Exception as exc:  # bad JSON, or the store's own checksum failing (py4j)
            raise LaneError(f"{root}/{LANES_FILE} is unreadable ({exc}); restore it from a "
                            "backup of the checkpoint: it says where each key's state is"
                            ) from exc
        finally:
            stream.close()
    if fs.exists(jvm.org.apache.hadoop.fs.Path(f"{root}/offsets")):
        raise LaneError(
            f"checkpoint {root} was made before state lanes: its state is keyed by "
            "(destination, subscription) only. Start this version with a new "
            "stream.checkpoint_dir (the Delta tables stay; the job resumes from "
            "stream.starting_offsets) or keep running the previous version on it")
    n = settings.stream.shuffle_partitions
    keys = configured_keys(settings)
    where = spark_partitions(spark, keys, n)
    lanes = plan_lanes(keys, n, lambda lane, key: where[(lane, key)])
    stream = fs.create(path, False)
    stream.write(to_json(lanes, n).encode())
    stream.close()
    return lanes
