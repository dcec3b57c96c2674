"""The catalog views' SQL as the job writes it, without Spark: what each view filters on and
what it reads, in the order they must be made. That the views return exactly the trustworthy
rows is run on Spark (tests/spark/typed/test_catalog_views.py) and over JDBC
(tests/e2e/test_cluster.py); here the rules a conf change could break: a subscription over
two databases, two destinations, a layout of the second database."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import load_settings
from pipeline.spark.land.watermark import ALL_VIEW, DB_VIEW, view_queries
from pipeline.spark.typed.catalog import current_view, current_view_query

CONF = """
topics:
  outputs: {urb.a: OUT1, urb.b: OUT2}
subscriptions:
  - name: COLOR
    destinations: [OUT1, OUT2]
    files: [{dbid: 10006, fnr: 4}, {dbid: 10007, fnr: 4}]
  - name: EMPLOYEE
    destinations: [OUT1]
    files: [11]
layouts:
  - {subscription: COLOR, dbid: 10006, fnr: 4, format_buffer: "AA,16,A.", columns: {AA: color}}
  - {subscription: COLOR, dbid: 10007, fnr: 4, format_buffer: "AA,16,A.", columns: {AA: color}}
catalog: {enabled: true, schema: lake}
"""


def _settings(tmp_path: Path):
    conf = tmp_path / "c.yaml"
    conf.write_text(CONF)
    return load_settings(conf, env={})


def test_watermark_views_in_order_each_null_until_every_part_has_one(tmp_path: Path) -> None:
    views = view_queries(_settings(tmp_path))
    assert list(views) == [DB_VIEW, "v_watermark_color", "v_watermark_employee", ALL_VIEW], (
        "each view reads the one before it")
    per_db = views[DB_VIEW][1]
    assert "FROM `lake`.`watermarks`" in per_db
    assert "ORDER BY computed_at DESC, batch_id DESC" in per_db, "each key's latest row"
    assert ("CASE WHEN count(watermark) = 2 THEN min(watermark) END" in per_db
            and "destination IN ('OUT1', 'OUT2')" in per_db), "COLOR: both destinations"
    assert "CASE WHEN count(watermark) = 1" in per_db and "destination IN ('OUT1')" in per_db
    comment, color = views["v_watermark_color"]
    assert "dbid IN (10006, 10007)" in color and "count(watermark) = 2" in color
    assert "each on its own clock" in comment, "says it combines two databases' clocks"
    assert "one database, one clock: exact" in views["v_watermark_employee"][0]
    every = views[ALL_VIEW][1]
    assert "count(watermark) = 2" in every and "`lake`.`v_watermark_employee`" in every


def test_a_current_view_filters_by_its_own_databases_watermark_and_file(
        tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    lay = settings.layouts[1]  # file 4 of the second database: its own tables and view
    assert current_view(lay) == "v_current_color_10007_4"
    comment, query = current_view_query(settings, lay)
    assert query.startswith("SELECT c.* FROM `lake`.`current_color_10007_4` c WHERE ")
    assert "NOT c.deleted AND c.verified" in query
    assert (f"c.commit_time <= (SELECT watermark FROM `lake`.`{DB_VIEW}` WHERE subscription "
            "= 'COLOR' AND dbid = 10007)") in query
    assert ("coalesce((SELECT status FROM `lake`.`file_status` WHERE dbid = 10007 AND fnr = 4 "
            "ORDER BY version DESC, seq DESC LIMIT 1), 'active') = 'active'") in query
    assert "database 10007" in comment
