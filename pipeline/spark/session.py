"""The one Spark session factory: Delta, the resolved jars, local[*] and everything from conf.

Nothing here resolves packages through Spark's Ivy at run time: the jars come from
``make jars`` (Maven, from the manifests in jvm/) and reach Spark through ``spark.jars``.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from pipeline.config import Settings
from pipeline.spark.jars import spark_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_SUBMIT_KEYS = frozenset({"spark.master", "spark.jars", "spark.driver.memory"})


def session_conf(settings: Settings) -> dict[str, str]:
    """Every Spark setting the product relies on, from conf, as one dict (tested without Spark)."""
    s = settings.spark
    conf = {
        "spark.master": s.master,
        "spark.app.name": s.app_name,
        "spark.driver.memory": s.driver_memory,
        "spark.jars": ",".join(spark_jars(settings.location(s.jars_dir))),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Frozen into the checkpoint of a stateful query: small on small machines.
        "spark.sql.shuffle.partitions": str(settings.stream.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "256",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # Delta rebuilds table snapshots with 50 partitions by default: far too many tasks
        # for small per-batch commits on few cores.
        "spark.databricks.delta.snapshotPartitions": str(
            max(2, settings.stream.shuffle_partitions)),
        "spark.sql.warehouse.dir": settings.location(".run/spark-warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={settings.location('.run')}",
    }
    conf.update(s.conf)
    return conf


def build_session(settings: Settings) -> SparkSession:
    """Create (or return the active) SparkSession configured from settings."""
    from pyspark.sql import SparkSession

    # Executors must run the same interpreter as the driver (the project venv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkConf

    # Under spark-submit, its own --master/--jars/--driver-memory win over conf/.
    submitted = SparkConf()
    builder = SparkSession.builder
    for key, value in session_conf(settings).items():
        if key in _SUBMIT_KEYS and submitted.contains(key):
            continue
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark.log_level)
    return spark
