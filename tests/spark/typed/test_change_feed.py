"""Delta Change Data Feed on ``current_color_4`` (``stream.change_feed``), on hand-made batches
(no Kafka): a downstream job reading ``readChangeFeed`` from a version sees the inserts, an
update (pre- and post-image), a delete and the rows an initial-state refresh (AUTI URBSU
X'48') truncated, and a replayed batch adds nothing to the feed."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.spark.land.tables import ensure_tables, table_path
from pipeline.spark.typed.lifecycle import apply_lifecycle
from pipeline.urb import make_element
from tests.e2e.test_lifecycle import _status
from tests.spark.typed.test_typed_merge import Batch, _settings, land_typed

APP = "feed-test"
REFRESH_SEC = 20  # the refresh's cutoff: rows committed before it are truncated


def _batches(settings: Settings) -> list[Batch]:
    inserts = Batch(settings).tx(1, 10, [(1, "I", None, ("RED", 1)), (2, "I", None, ("BLUE", 2)),
                                         (3, "I", None, ("GOLD", 3))])
    changes = (Batch(settings).tx(2, 12, [(1, "U", ("RED", 1), ("PINK", 11))])
               .tx(3, 13, [(2, "D", ("BLUE", 2), None), (5, "I", None, ("LIME", 5))]))
    refresh = Batch(settings).tx(4, 25, [(4, "I", None, ("NEW", 4))])
    refresh.tables["status_events"] = [
        _status("AUTI", REFRESH_SEC, detail=make_element("URBSU", urbsutyp=0x48))]
    return [inserts, changes, refresh]


def _run(spark, batch: Batch, batch_id: int, settings: Settings, writer: str) -> None:
    frame = batch.frame(spark)
    land_typed(spark, batch.tables, batch_id, settings, APP, frame=frame, writer=writer)
    if "status_events" in batch.tables:
        apply_lifecycle(spark, frame, batch_id, settings, APP)


def _feed(spark, path: str, start: int) -> list[tuple]:
    rows = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", start).load(path)
            .select("isn", "color", "_change_type", "_commit_version").collect())
    return sorted((r._commit_version, r.isn, r._change_type, r.color) for r in rows)


@pytest.fixture(scope="module")
def fed(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    """The direct writer, whose feed delta-rs writes itself. Spark's typed path (an object
    store's) gets the same ``delta.enableChangeDataFeed`` from ``ensure_tables`` and its MERGE
    feed from Delta itself; ``test_typed_merge[spark]`` keeps its rules, replays included."""
    writer = "direct"
    settings = _settings(test_settings, tmp_path_factory.mktemp(f"feed-{writer}") / "lake")
    settings = settings.model_copy(update={"layouts": [  # no history table: fewer MERGEs
        lay.model_copy(update={"history": False}) for lay in settings.layouts]})
    ensure_tables(spark, settings)
    path = table_path(settings, "current_color_4")
    from delta.tables import DeltaTable

    versions = []
    for batch_id, batch in enumerate(_batches(settings)):
        _run(spark, batch, batch_id, settings, writer)
        versions.append(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])
    _run(spark, _batches(settings)[1], 1, settings, writer)  # a replay after a crash: skipped
    versions.append(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])
    return spark, path, versions


def _changes(feed: list[tuple]) -> list[tuple]:
    """(isn, change type, color) in commit order, without versions."""
    return [row[1:] for row in feed]


def test_the_current_table_has_the_feed_on(fed) -> None:
    spark, path, _ = fed
    props = {r["key"]: r["value"]
             for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert props["delta.enableChangeDataFeed"] == "true"


def test_the_feed_since_the_first_batch_shows_update_delete_and_refresh(fed) -> None:
    spark, path, versions = fed
    feed = _feed(spark, path, versions[0] + 1)
    assert {v for v, *_ in feed} <= set(range(versions[0] + 1, versions[2] + 1))
    by_batch = {
        "changes": _changes([r for r in feed if r[0] <= versions[1]]),
        "refresh": sorted(_changes([r for r in feed if r[0] > versions[1]]))}
    # an update, a delete and an insert in one batch (the direct writer: a MERGE and an
    # append, one feed)
    assert sorted(by_batch["changes"]) == [(1, "update_postimage", "PINK"),
                                           (1, "update_preimage", "RED"),
                                           (2, "delete", "BLUE"), (5, "insert", "LIME")]
    # the refresh truncates what was committed before its cutoff (ISN 1, 3 and 5); ISN 4,
    # committed after it, lands
    assert by_batch["refresh"] == [(1, "delete", "PINK"), (3, "delete", "GOLD"),
                                   (4, "insert", "NEW"), (5, "delete", "LIME")]


def test_the_feed_from_the_start_holds_the_inserts_and_nothing_of_the_replay(fed) -> None:
    spark, path, versions = fed
    feed = _feed(spark, path, 0)
    inserts = [r[1:] for r in feed if r[0] <= versions[0]]
    assert sorted(inserts) == [(1, "insert", "RED"), (2, "insert", "BLUE"),
                               (3, "insert", "GOLD")]
    assert max(v for v, *_ in feed) <= versions[2]
    assert versions[3] == versions[2], "the replay committed nothing"


def test_readers_outside_spark_read_the_table_and_its_feed(fed) -> None:
    """README's reader table, measured: ``deltalake`` (and DuckDB/polars over its Arrow
    dataset) read the current table with the feed on as Spark does; ``deltalake``'s
    ``load_cdf`` gives the feed Spark's ``readChangeFeed`` gives; no table of the lake carries
    deletion vectors (MERGE and the refresh rewrite files), so no reader needs them."""
    import duckdb
    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable

    spark, path, _ = fed
    table = DeltaTable(path)
    wanted = sorted((r.isn, r.color) for r in spark.read.format("delta").load(path).collect())
    dataset = table.to_pyarrow_dataset()
    assert sorted(zip(*dataset.to_table(columns=["isn", "color"]).to_pydict().values(),
                      strict=True)) == wanted
    assert sorted(duckdb.sql("SELECT isn, color FROM dataset").fetchall()) == wanted
    assert sorted(pl.scan_pyarrow_dataset(dataset).select("isn", "color").collect().rows()) \
        == wanted
    cdf = pa.table(table.load_cdf(starting_version=0)).to_pydict()
    feed = sorted(zip(cdf["_commit_version"], cdf["isn"], cdf["_change_type"], cdf["color"],
                      strict=True))
    assert feed == _feed(spark, path, 0) and feed, "delta-rs's feed is Spark's"
    lake = Path(path).parent
    features = {t.name: {*(DeltaTable(str(t)).protocol().reader_features or ()),
                         *(DeltaTable(str(t)).protocol().writer_features or ())}
                for t in lake.iterdir() if (t / "_delta_log").is_dir()}
    assert len(features) > 5 and not {n for n, f in features.items()
                                      if "deletionVectors" in f}, features
