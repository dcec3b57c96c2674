"""The local file system Hadoop gives Spark and Delta for ``file:`` paths (decision 0020).

Why: a pip-installed pyspark has no Hadoop native library, and without it Hadoop's local file
system forks ``chmod`` for each file it creates and ``readlink`` for each link status (which
``FileContext`` asks before every rename): a Delta commit forked ~13 processes and each
streaming batch's offset and commit logs ~20 more, a few milliseconds each. The project's
``urbpipe.hadoop.NioLocalFileSystem`` and ``NioLocalFs`` (jvm/localfs) do both through Java
NIO. Hadoop reads ``fs.file.impl`` when it first touches a ``file:`` path, which spark-submit
does before ``spark.jars`` are loaded: the jar goes on the driver's own class path. Only for a
``local[…]`` master, where executors are the driver's JVM; a cluster keeps Hadoop's.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import ConfigError, Settings

FILE_SYSTEM = "urbpipe.hadoop.NioLocalFileSystem"
FILE_CONTEXT = "urbpipe.hadoop.NioLocalFs"
JAR = "urbpipe-localfs"
#: Hadoop's settings naming the local file system's classes (FileSystem, FileContext).
KEYS = ("spark.hadoop.fs.file.impl", "spark.hadoop.fs.AbstractFileSystem.file.impl")


def is_local(master: str) -> bool:
    return master.strip().startswith("local")


def jar(settings: Settings) -> str | None:
    """The jar's path when conf asks for the project's file system (None: Hadoop's).
    Raises ConfigError when scripts/setup.sh has not built it."""
    if settings.spark.local_file_system != "nio":
        return None
    jars = Path(settings.location(settings.spark.jars_dir))
    found = sorted(jars.glob(f"{JAR}-*.jar"))
    if not found:
        raise ConfigError(f"spark.local_file_system is nio but {jars} has no {JAR} jar: run "
                          "`scripts/setup.sh` (it builds jvm/localfs), or set "
                          "spark.local_file_system: hadoop")
    return str(found[-1].resolve())


def conf(settings: Settings, master: str) -> dict[str, str]:
    """Hadoop's settings for the project's local file system, for a ``local[…]`` master
    (else none: Hadoop's own)."""
    if settings.spark.local_file_system != "nio" or not is_local(master):
        return {}
    return {KEYS[0]: FILE_SYSTEM, KEYS[1]: FILE_CONTEXT}
