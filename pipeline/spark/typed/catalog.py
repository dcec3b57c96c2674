"""Every table the job writes, and the views over them, in the catalog (``catalog.schema``).

What analysts find by name (``SHOW TABLES IN urbpipe``):

* every table ``job_tables`` names for the conf (the job's own, each layout's typed tables)
  that exists in the lake, as an external Delta table at its path
  (``pipeline.spark.land.catalog``);
* ``v_watermarks`` (per subscription and database), ``v_watermark_<subscription>`` and
  ``v_watermark``: the consistency watermarks (``pipeline.spark.land.watermark``);
* ``v_current_<suffix>`` per layout (the typed tables' suffix, ``Layout.table_suffix()``):
  the current table's trustworthy rows — not deleted, verified, the file active (its latest
  ``file_status`` row), committed at or before its database's watermark.

``publish`` runs at every start of the job, after the tables are created and reconciled (so a
layout added to the conf appears with its tables), and is what ``urbpipe catalog sync`` runs on
an existing lake. It is idempotent: names at their paths are kept, views are replaced with the
conf's text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import Layout, Settings
from pipeline.spark.land import catalog
from pipeline.spark.land.log_peek import look
from pipeline.spark.land.tables import table_path
from pipeline.spark.land.watermark import DB_VIEW, view_queries
from pipeline.spark.land.watermark import TABLE as WATERMARKS
from pipeline.spark.typed.tables import current_table, job_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def current_view(lay: Layout) -> str:
    """The trustworthy-snapshot view of a layout's current table."""
    return f"v_{current_table(lay)}"


def current_view_query(settings: Settings, lay: Layout) -> tuple[str, str]:
    """(comment, query) of ``current_view(lay)``: filtered by the watermark of the layout's
    own database (``v_watermarks``), the clock its rows' commit times are on."""
    schema = settings.catalog.schema_name
    current = current_table(lay)
    status = (f"(SELECT status FROM `{schema}`.`file_status` WHERE dbid = {lay.dbid} AND "
              f"fnr = {lay.fnr} ORDER BY version DESC, seq DESC LIMIT 1)")
    watermark = (f"(SELECT watermark FROM `{schema}`.`{DB_VIEW}` WHERE subscription = "
                 f"'{lay.subscription}' AND dbid = {lay.dbid})")
    comment = (f"The rows of {current} an analyst can trust: not deleted, verified, file "
               f"{lay.dbid}/{lay.fnr} active (its latest file_status row), committed at or "
               f"before the consistency watermark of subscription {lay.subscription} and "
               f"database {lay.dbid} ({DB_VIEW}). A row changed after the watermark is left "
               "out until the watermark passes it.")
    query = (f"SELECT c.* FROM `{schema}`.`{current}` c WHERE NOT c.deleted AND c.verified "
             f"AND c.commit_time <= {watermark} "
             f"AND coalesce({status}, 'active') = 'active'")
    return comment, query


def publish(spark: SparkSession, settings: Settings) -> list[str]:
    """Register every table of the conf the lake has, then the views whose tables are
    registered. One line per name: what was done."""
    if not settings.catalog.enabled:
        return []
    catalog.ensure_schema(spark, settings)
    lines, named = [], set()
    for name in job_tables(settings):
        if look(spark, settings, table_path(settings, name)) is None:
            lines.append(f"{name}: not in the lake ({table_path(settings, name)})")
            continue
        lines.append(f"{name}: {catalog.register(spark, settings, name)}")
        named.add(name)
    if {WATERMARKS, "file_status"} <= named:
        for view, (comment, query) in view_queries(settings).items():
            catalog.create_view(spark, settings, view, comment, query)
            lines.append(f"{view}: view")
        for lay in settings.layouts:
            if current_table(lay) in named:
                comment, query = current_view_query(settings, lay)
                catalog.create_view(spark, settings, current_view(lay), comment, query)
                lines.append(f"{current_view(lay)}: view")
    return lines
