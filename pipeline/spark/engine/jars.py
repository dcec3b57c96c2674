"""Which resolved JVM jars Spark gets through ``spark.jars``.

Maven copies the Kafka connector and Delta with all their runtime dependencies into
``spark.jars_dir`` (and, for an ``s3a://`` lake or checkpoint, hadoop-aws with the AWS SDK into
``object_store.jars_dir``); many of those (Jackson, log4j, Parquet, Hadoop client, Scala
library, Netty …) ship with pyspark already, in other versions. Passing both puts two versions
of one class on the class path, so jars whose artifact pyspark already has are left out.

    python -m pipeline.spark.engine.jars [--conf-file F]   # prints the comma-separated list
    python -m pipeline.spark.engine.jars --driver-class-path [--conf-file F]

The second prints what spark-submit's ``--driver-class-path`` needs for the conf (Derby's client
driver for the embedded catalog, ``pipeline.spark.engine.metastore``, and the project's local
file system, ``pipeline.spark.engine.localfs``; empty without either).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pipeline.config import ConfigError, Settings, load_settings

_ARTIFACT = re.compile(r"^(?P<name>.+?)-\d[\w.+-]*\.jar$")
# pyspark ships jcl-over-slf4j, which provides the commons-logging classes itself.
_ALSO_SHIPPED = frozenset({"commons-logging"})


def artifact(jar_name: str) -> str:
    """Artifact id of a Maven jar file name: ``jackson-core-2.13.5.jar`` → ``jackson-core``."""
    m = _ARTIFACT.match(jar_name)
    return m.group("name") if m else jar_name.removesuffix(".jar")


def pyspark_artifacts() -> set[str]:
    import pyspark

    return {artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def spark_jars(jars_dir: str | Path) -> list[str]:
    """Absolute paths of the resolved jars pyspark does not already ship, sorted."""
    shipped = pyspark_artifacts()
    found = sorted(Path(jars_dir).glob("*.jar"))
    if not any(p.name.startswith("spark-sql-kafka") for p in found):
        raise FileNotFoundError(f"no Spark Kafka connector in {jars_dir}: run `make jars` first")
    skip = shipped | _ALSO_SHIPPED
    return [str(p.resolve()) for p in found if artifact(p.name) not in skip]


def object_store_jars(jars_dir: str | Path) -> list[str]:
    """The s3a:// jars (hadoop-aws, the AWS SDK modules, spark-hadoop-cloud; jvm/s3/pom.xml)
    pyspark does not already ship, sorted."""
    found = sorted(Path(jars_dir).glob("*.jar"))
    if not any(p.name.startswith("hadoop-aws-") for p in found):
        raise FileNotFoundError(f"no hadoop-aws in {jars_dir} (needed for an s3a:// lake or "
                                "checkpoint): run `scripts/setup.sh` first")
    skip = pyspark_artifacts() | _ALSO_SHIPPED
    return [str(p.resolve()) for p in found if artifact(p.name) not in skip]


def settings_jars(settings: Settings) -> list[str]:
    """Every jar this conf needs: Kafka and Delta always, the S3A connector only when the lake
    or the checkpoint is on ``s3a://``. Why not always: they are 19 MB that spark-submit would
    ship to every executor of every job for nothing, and hadoop-aws on the class path of a
    job that never touches S3 is one more thing to go wrong (its SDK logs, its services)."""
    jars = spark_jars(settings.location(settings.spark.jars_dir))
    if settings.on_object_store():
        jars += object_store_jars(settings.location(settings.object_store.jars_dir))
    return jars


def driver_class_path(settings: Settings) -> list[str]:
    """What the driver JVM's own class path needs for this conf: the catalog's JDBC driver
    and the project's local file system (either may be absent)."""
    from pipeline.spark.engine import localfs, metastore

    return [*metastore.driver_class_path(settings), *filter(None, [localfs.jar(settings)])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.spark.engine.jars",
                                     description="Print the spark.jars list (comma-separated).")
    parser.add_argument("--conf-file", default=None)
    parser.add_argument("--driver-class-path", action="store_true",
                        help="print the driver's class path (colon-separated) instead")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.conf_file)
        if args.driver_class_path:
            print(":".join(driver_class_path(settings)))
        else:
            print(",".join(settings_jars(settings)))
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
