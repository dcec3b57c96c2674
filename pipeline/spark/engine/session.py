"""The one Spark session factory: Delta, the resolved jars, local[*] and everything from conf.

Nothing here resolves packages through Spark's Ivy at run time: the jars come from
``make jars`` (Maven, from the manifests in jvm/) and reach Spark through ``spark.jars``
(``--jars`` under spark-submit). Under spark-submit its own settings win over conf
(``pipeline/spark/engine/launcher.py`` says what the launcher exposes and how the two meet).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline import objectstore
from pipeline.config import ConfigError, Settings
from pipeline.spark.engine import localfs, metastore
from pipeline.spark.engine.jars import driver_class_path, settings_jars
from pipeline.spark.engine.launcher import Launch, SessionConf, merge, read_launch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("urbpipe.session")

#: Classes the driver must load: without them spark-submit was not given the jars.
_DRIVER_CLASSES = {"org.apache.spark.sql.kafka010.KafkaSourceProvider": "the Kafka connector",
                   "io.delta.sql.DeltaSparkSessionExtension": "Delta"}


#: Spark's default ``(?i)secret|password|token|access[.]?key``, plus the Kafka keys that hold a
#: secret without saying so: ``sasl.jaas.config`` (the SASL password or client secret) and the
#: inlined PEM key of mutual TLS (``ssl.keystore.key``, pipeline/kafka_security.py). Spark
#: masks matching keys (and the Kafka source's options) in the UI, event logs and its logs.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|keystore[.]key"
#: The driver JVM's options: conf's (``spark.conf``) first, then the Derby home the product sets.
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: The driver JVM's own class path: conf's first, then the catalog's JDBC driver.
CLASS_PATH = "spark.driver.extraClassPath"
#: The project's Delta log stores (jvm/logstore): local lakes' (decision 0017), S3 lakes'
#: (decision 0019), and their jar.
LOG_STORE_CLASS = "urbpipe.delta.ProbingLocalLogStore"
S3_LOG_STORE_CLASS = "urbpipe.delta.StartAfterS3LogStore"
LOG_STORE_JAR = "urbpipe-logstore"


def session_conf(settings: Settings, *, jars: bool = True) -> dict[str, str]:
    """Every Spark setting the product relies on, from conf, as one dict (tested without Spark).

    ``jars=False`` leaves out ``spark.jars`` (and does not look for them): under spark-submit
    the jars come from ``--jars``, and ``spark.jars_dir`` need not exist on the driver's host.
    """
    s = settings.spark
    conf = {
        "spark.master": s.master,
        "spark.app.name": s.app_name,
        "spark.driver.memory": s.driver_memory,
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
        JAVA_OPTIONS: f"-Dderby.system.home={settings.location('.run')}",
        "spark.redaction.regex": REDACTION_REGEX,
    }
    if jars:
        conf["spark.jars"] = ",".join(settings_jars(settings))
    # an s3a:// lake or checkpoint: the S3A connector pointed at object_store (else nothing)
    conf.update(objectstore.spark_conf(settings))
    # the catalog: Hive support, and the embedded metastore's database (else nothing)
    conf.update(metastore.catalog_conf(settings))
    # a lake's log listed from the version asked for, not by folder (jvm/logstore)
    conf.update(log_store_conf(settings, check_jar=jars))
    # a local master's file: paths without a forked process per file (jvm/localfs)
    conf.update(localfs.conf(settings, s.master))
    java = " ".join(filter(None, (s.conf.get(JAVA_OPTIONS), conf[JAVA_OPTIONS])))
    conf.update({**s.conf, JAVA_OPTIONS: java})  # conf's JVM options, and Derby's home too
    if jars:  # under spark-submit the class path is --driver-class-path's (jars module)
        path = ":".join(filter(None, (s.conf.get(CLASS_PATH), *driver_class_path(settings))))
        if path:
            conf[CLASS_PATH] = path
    return conf


def log_store_conf(settings: Settings, *, check_jar: bool = True) -> dict[str, str]:
    """Delta's log stores: the project's for ``file:`` paths (probing the log's names) and,
    when the lake or checkpoint is on S3, for ``s3a:`` paths (a start-after listing), unless
    conf says ``hadoop`` (``stream.delta_log_store``). Their jar is built by scripts/setup.sh into
    ``spark.jars_dir``, with the jars Spark gets; a conf asking for it without the jar is
    refused here rather than by the first Delta commit (under spark-submit, whose ``--jars``
    bring it, by the driver's class check instead: ``check_jar`` False)."""
    if settings.stream.delta_log_store != "probing":
        return {}
    jars = Path(settings.location(settings.spark.jars_dir))
    if check_jar and not any(jars.glob(f"{LOG_STORE_JAR}-*.jar")):
        raise ConfigError(f"stream.delta_log_store is probing but {jars} has no "
                          f"{LOG_STORE_JAR} jar: run `scripts/setup.sh` (it builds "
                          "jvm/logstore), or set stream.delta_log_store: hadoop")
    conf = {"spark.delta.logStore.file.impl": LOG_STORE_CLASS}
    if settings.on_object_store():  # its class needs hadoop-aws, there only then
        conf["spark.delta.logStore.s3a.impl"] = S3_LOG_STORE_CLASS
    return conf


def resolve_conf(settings: Settings, launch: Launch) -> SessionConf:
    """conf/ under what the launcher set: its settings win, conf fills what is unset."""
    need_jars = "spark.jars" not in launch.submitted and not launch.driver_running
    resolved = merge(session_conf(settings, jars=need_jars), launch)
    if localfs.is_local(resolved.conf.get("spark.master", "local[*]")):
        return resolved
    # spark-submit's cluster master: executors of their own, Hadoop's local file system
    return replace(resolved, conf={k: v for k, v in resolved.conf.items()
                                   if k not in localfs.KEYS or k in resolved.from_launcher})


def build_session(settings: Settings) -> SparkSession:
    """Create (or return the active) SparkSession configured from settings.

    Raises ConfigError when spark-submit started the driver without the jars the job needs.
    """
    from pyspark.sql import SparkSession

    # Executors must run the same interpreter as the driver (the project venv); under
    # spark-submit, spark.pyspark.python sets PYSPARK_PYTHON before this runs.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    launch = read_launch()
    resolved = resolve_conf(settings, launch)
    if launch.driver_running:
        _require_driver_classes(settings, resolved.conf)
    metastore.ensure(settings)  # the embedded catalog's server, if this conf has one
    builder = SparkSession.builder
    for key, value in resolved.conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark.log_level)
    _log_session(spark, resolved, settings)
    return spark


def _require_driver_classes(settings: Settings, conf: dict[str, str]) -> None:
    """Fail in one line when spark-submit started the driver without ``--jars``: the jars
    cannot be added to a running driver's class path (a later spark.jars reaches executors
    only, and the job would fail on its first Kafka read, or its first s3a:// access)."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None
    needed = dict(_DRIVER_CLASSES)
    if settings.on_object_store():
        needed["org.apache.hadoop.fs.s3a.S3AFileSystem"] = "the S3A connector (hadoop-aws)"
    if log_store_conf(settings, check_jar=False):
        needed[LOG_STORE_CLASS] = f"the project's Delta log store ({LOG_STORE_JAR})"
    missing = [what for cls, what in needed.items()
               if not jvm.org.apache.spark.util.Utils.classIsLoadable(cls)]
    if missing:
        raise ConfigError(
            f"spark-submit started the driver without {' and '.join(missing)}: pass "
            "--jars \"$(python -m pipeline.spark.engine.jars --conf-file <conf>)\"")
    if metastore.driver_class_path(settings) and not _on_system_class_path(
            jvm, metastore.CLIENT_DRIVER):
        raise ConfigError(
            "spark-submit started the driver without the catalog's JDBC driver (Derby's "
            "client, catalog.metastore: local): pass --driver-class-path \"$(python -m "
            "pipeline.spark.engine.jars --driver-class-path --conf-file <conf>)\"")
    if conf.get(localfs.KEYS[0]) == localfs.FILE_SYSTEM and not _on_system_class_path(
            jvm, localfs.FILE_SYSTEM):
        raise ConfigError(
            f"spark-submit started the driver without the project's local file system "
            f"({localfs.JAR}, spark.local_file_system: nio): pass --driver-class-path "
            "\"$(python -m pipeline.spark.engine.jars --driver-class-path --conf-file "
            "<conf>)\", or set spark.local_file_system: hadoop")


def _on_system_class_path(jvm: Any, cls: str) -> bool:
    """Can the driver JVM's application class loader load ``cls``? The Hive client loads
    its JDBC driver there; ``--jars`` reach only Spark's own loader above it."""
    try:
        jvm.java.lang.Class.forName(cls, False, jvm.java.lang.ClassLoader.getSystemClassLoader())
    except Exception:
        return False
    return True


def _log_session(spark: SparkSession, resolved: SessionConf, settings: Settings) -> None:
    """One line saying where the job runs and who decided it (spark-submit or conf), and a
    warning for a launch-time setting of the user's conf the running driver could not take."""
    conf = spark.sparkContext.getConf()

    def shown(key: str) -> str:
        if not conf.contains(key):
            return "spark-submit's default"
        source = "spark-submit" if key in resolved.from_launcher else "conf"
        return f"{conf.get(key)} ({source})"

    log.info("Spark session %s: master %s, deploy mode %s, driver memory %s",
             spark.sparkContext.applicationId, shown("spark.master"),
             conf.get("spark.submit.deployMode", "client"), shown("spark.driver.memory"))
    users = {"spark.driver.memory", *settings.spark.conf}
    ignored = [f"{k}={v}" for k, v in resolved.not_applied.items() if k in users]
    if ignored:
        log.warning("conf's %s not applied: spark-submit started the driver JVM before the job "
                    "read its conf (give it to spark-submit instead)", ", ".join(ignored))
