"""The SQL endpoint for BI tools: Spark's Thrift JDBC/ODBC server on the job's catalog.

``urbpipe catalog serve`` starts a Spark application with the job's conf (its catalog: the
same metastore, so the same names and views) and runs Spark's Thrift server in it
(``HiveThriftServer2``, shipped with pyspark 4.2 as ``spark-hive-thriftserver``): the
HiveServer2 protocol that Tableau, Power BI, DBeaver, Excel (through the Simba/Databricks or
Cloudera Spark ODBC drivers) and ``beeline`` speak. Each connection gets its own Spark session
on the shared catalog; queries run in this application, reading the lake's Delta tables.

It listens on ``catalog.sql_server.host:port`` (127.0.0.1:10000 by default: no authentication
is configured, so anything that can reach the port can read the lake; put it behind the network
controls, or set HiveServer2's LDAP/Kerberos keys through ``spark.conf``,
``spark.hadoop.hive.server2.authentication`` …) and runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from pipeline.config import Settings
from pipeline.errors import UsageError
from pipeline.spark.engine.session import CLASS_PATH


def jdbc_url(settings: Settings) -> str:
    """What a JDBC client connects to (the catalog's schema as the default database)."""
    sql = settings.catalog.sql_server
    return f"jdbc:hive2://{sql.host}:{sql.port}/{settings.catalog.schema_name}"


def server_settings(settings: Settings) -> Settings:
    """The job's settings with the Thrift server's address in the Spark conf."""
    if not settings.catalog.enabled:
        raise UsageError("the SQL endpoint serves the catalog, and catalog.enabled is false")
    from pipeline.spark.engine.jars import settings_jars

    sql = settings.catalog.sql_server
    # Each JDBC connection's session is made on a Thrift handler thread, whose class loader
    # is the driver JVM's own: Delta's catalog must be on its class path, not only in
    # spark.jars (ClassNotFoundException: org.apache.spark.sql.delta.catalog.DeltaCatalog)
    path = ":".join(filter(None, [settings.spark.conf.get(CLASS_PATH), *settings_jars(settings)]))
    conf = {**settings.spark.conf, CLASS_PATH: path,
            "spark.hadoop.hive.server2.thrift.bind.host": sql.host,
            "spark.hadoop.hive.server2.thrift.port": str(sql.port)}
    return settings.model_copy(update={"spark": settings.spark.model_copy(update={
        "conf": conf, "app_name": f"{settings.spark.app_name}-sql"})})


def serve(settings: Settings, say: Callable[[str], None],
          stop: threading.Event | None = None) -> None:
    """Start the Thrift server; return once ``stop`` is set (SIGTERM/SIGINT set it when no
    event is given), after stopping the server and the session."""
    from pipeline.spark.engine.session import build_session

    spark = build_session(server_settings(settings))
    jvm: Any = spark.sparkContext._jvm
    server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithSparkSession(
        spark._jsparkSession, False)
    if stop is None:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    say(f"SQL endpoint ready: {jdbc_url(settings)} (HiveServer2 protocol, Spark "
        f"{spark.version}); stop with SIGTERM or Ctrl-C")
    try:
        while not stop.wait(1.0):  # a timed wait: the signal handler runs between waits
            pass
    finally:
        server.stop()
        spark.stop()
