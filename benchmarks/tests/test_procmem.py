"""The benchmarks' memory sampler counts PySpark's Python workers and nothing else the JVM
starts: a ``chmod``/``readlink`` child of Hadoop's local file system, sampled before its
exec, shares the JVM's memory and once read as a 1.5 GB "largest worker"."""

from __future__ import annotations

import pytest

from benchmarks.procmem import is_python_worker


@pytest.mark.parametrize("cmdline", [
    "/repo/.venv/bin/python -m pyspark.daemon pyspark.worker ",
    "/usr/bin/python3.11 -m pyspark.daemon",
])
def test_pyspark_workers_count(cmdline: str) -> None:
    assert is_python_worker(cmdline)


@pytest.mark.parametrize("cmdline", [
    # a child between spawn and exec shows its parent's command line: the driver JVM's
    "/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp /repo/pyspark/conf "
    "org.apache.spark.deploy.SparkSubmit pyspark-shell",
    "/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper 17.0.15+6 450:451:453 ",
    "chmod 0644 /tmp/pyspark-lake/part-0.snappy.parquet",
    "readlink file:/tmp/lake/gaps/_delta_log/00000000000000000002.crc",
    "",
])
def test_the_jvms_other_children_do_not(cmdline: str) -> None:
    assert not is_python_worker(cmdline)
