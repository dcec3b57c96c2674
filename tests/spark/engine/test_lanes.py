"""State lanes against Spark itself: the planned lanes put the configured keys on the
partitions Spark's hash exchange really sends them to, and the plan lives with the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.spark.engine.lanes import LANES_FILE, LaneError, checkpoint_lanes, spark_partitions


def _settings(test_settings, partitions: int):
    stream = test_settings.stream.model_copy(update={"shuffle_partitions": partitions})
    return test_settings.model_copy(update={"stream": stream})


@pytest.mark.parametrize("partitions", [2, 3])
def test_planned_lanes_land_keys_round_robin_in_sparks_own_exchange(
        spark, test_settings, tmp_path: Path, partitions: int) -> None:
    from pyspark.sql import functions as F

    settings = _settings(test_settings, partitions)
    lanes = checkpoint_lanes(spark, settings, str(tmp_path / "ck"))
    keys = list(lanes)
    assert keys, "the test conf names subscriptions"
    rows = [(lanes[k], *k) for k in keys]
    # the stateful step's exchange: hashpartitioning(lane, destination, subscription, n)
    placed = (spark.createDataFrame(rows, "lane int, destination string, subscription string")
              .repartition(partitions, "lane", "destination", "subscription")
              .select("destination", "subscription", F.spark_partition_id().alias("p"))
              .collect())
    where = {(r["destination"], r["subscription"]): r["p"] for r in placed}
    assert [where[k] for k in keys] == [i % partitions for i in range(len(keys))]
    assert spark_partitions(spark, keys, partitions)[(lanes[keys[0]], keys[0])] == 0


def test_the_plan_is_kept_and_an_older_checkpoint_is_refused(spark, test_settings,
                                                             tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    first = checkpoint_lanes(spark, _settings(test_settings, 2), str(ck))
    assert (ck / LANES_FILE).exists()
    # a later start reads the plan back, whatever the conf says now
    assert checkpoint_lanes(spark, _settings(test_settings, 3), str(ck)) == first
    old = tmp_path / "old"
    (old / "offsets").mkdir(parents=True)  # state keyed before lanes existed
    with pytest.raises(LaneError, match="made before state lanes"):
        checkpoint_lanes(spark, _settings(test_settings, 2), str(old))
    (ck / LANES_FILE).write_text("{not json")
    with pytest.raises(LaneError, match="unreadable"):
        checkpoint_lanes(spark, _settings(test_settings, 2), str(ck))
