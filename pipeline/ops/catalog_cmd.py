"""``urbpipe catalog``: the tables by name — register an existing lake, serve it over JDBC/ODBC,
print its data dictionary.

    urbpipe catalog sync        register every table of the conf the lake has, and the views
    urbpipe catalog serve       Spark's Thrift JDBC/ODBC server on the catalog (BI tools)
    urbpipe catalog dictionary  the data dictionary (Markdown) of the conf's tables

The metastore itself (the embedded Derby server of ``catalog.metastore: local``) starts with
the first session that needs it; ``python -m pipeline.spark.engine.metastore stop`` stops it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from pipeline import errors
from pipeline.config import Settings
from pipeline.errors import UsageError

SYNC = """\
Register every table the job writes for this conf (its own tables, each layout's typed
tables) that the lake has, as external Delta tables at their paths, in catalog.schema, with the
views v_watermark_<subscription>, v_watermark and v_current_<subscription>_<fnr>; columns
without their comments get them. The job does the same at every start; this is for a lake
made without the catalog (or by an older version), or a new metastore. Idempotent: names at
their paths are kept, a name the job registered elsewhere (a moved lake) is pointed here, a
name that is not the job's is refused (exit 2). Starts Spark with the job's conf."""

SERVE = """\
Start Spark's Thrift JDBC/ODBC server (HiveServer2 protocol) on the job's catalog, at
catalog.sql_server.host:port, and serve until SIGTERM or Ctrl-C. BI tools (Tableau, Power BI,
DBeaver, Excel) connect with a Spark/Hive ODBC or JDBC driver to that host and port
(transport binary, no authentication, database catalog.schema); from the command line:
  .venv/bin/beeline -u jdbc:hive2://127.0.0.1:10000/urbpipe -e 'SHOW TABLES'"""


def cmd_sync(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.spark.engine.session import build_session
    from pipeline.spark.typed.catalog import publish

    if not settings.catalog.enabled:
        raise UsageError("catalog.enabled is false: nothing to register")
    for line in publish(build_session(settings), settings):
        print(f"{settings.catalog.schema_name}.{line}")
    return errors.OK


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.sql_server import serve

    sql = settings.catalog.sql_server.model_copy(update={
        k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None})
    settings = settings.model_copy(update={"catalog": settings.catalog.model_copy(
        update={"sql_server": sql})})
    serve(settings, lambda line: print(line, flush=True))
    return errors.OK


def cmd_dictionary(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.dictionary import render

    print(render(settings, args.conf_file or "the conf"), end="")
    return errors.OK


def add_parsers(subs: Any, sub: Callable[..., argparse.ArgumentParser],
                group: Callable[..., Any]) -> None:
    """The ``catalog`` command and its actions (``sub``/``group``: the CLI's own helpers)."""
    csub = group(subs, "catalog", "the tables by name: register, serve over JDBC, dictionary",
                 "The catalog (catalog.schema in the metastore of catalog.metastore) where "
                 "analysts, notebooks and BI tools find the job's tables by name.")
    sub(csub, "sync", "register the lake's tables and views in the catalog", SYNC, cmd_sync)
    p = sub(csub, "serve", "Spark's Thrift JDBC/ODBC server on the catalog, for BI tools",
            SERVE, cmd_serve)
    p.add_argument("--host", help="listen address (default catalog.sql_server.host)")
    p.add_argument("--port", type=int, help="port (default catalog.sql_server.port)")
    sub(csub, "dictionary", "print the data dictionary of the conf's tables (Markdown)",
        "Every table the job writes for this conf, every column's type, nullability and "
        "meaning: the comments the Delta schemas carry. No Spark.", cmd_dictionary)
