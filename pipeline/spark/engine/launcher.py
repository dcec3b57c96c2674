"""What the launcher (spark-submit) set, read before the session exists, and how it meets conf/.

The precedence rule: a setting spark-submit was given (``--master``, ``--deploy-mode``,
``--jars``, ``--driver-memory``, ``--conf k=v``, a properties file) wins; ``conf/`` fills only
what is unset. Until a SparkContext exists, pyspark's ``SparkConf()`` is an empty Python dict
(``pyspark/conf.py``: it reads the JVM only once ``SparkContext._jvm`` is set), so the old
"``SparkConf().contains(key)``" check never saw spark-submit and conf always won.

What the launcher really exposes to the Python driver (pyspark 4.2, checked by running
spark-submit on a probe script):

- ``spark-submit app.py``: the JVM's ``SparkSubmit`` starts a py4j gateway and launches the
  driver with ``PYSPARK_GATEWAY_PORT``/``PYSPARK_GATEWAY_SECRET`` in its environment
  (``pyspark/java_gateway.py`` attaches to it instead of starting a JVM). Every setting it
  was given is a ``spark.*`` system property of that JVM, and so are two defaults it always
  adds: ``spark.master=local[*]`` without ``--master`` and ``spark.app.name=<script file
  name>`` without ``--name``. Those two are told apart by the JVM's own command line (the
  ``sun.java.command`` property: ``org.apache.spark.deploy.SparkSubmit <its arguments>``).
  The driver JVM is already running, so launch-time settings (driver memory, driver class
  path and Java options, the jars on the driver's class path) can no longer come from conf.
- ``python app.py`` with ``PYSPARK_SUBMIT_ARGS="--master … pyspark-shell"``: pyspark launches
  spark-submit itself with those arguments after the ``--conf`` pairs of the session's conf,
  and the Python conf wins at SparkContext creation: the arguments are parsed here.
- ``python app.py`` alone: nothing is submitted; conf is everything.

Any other launcher (a YARN or Kubernetes cluster-mode driver, a notebook's gateway) exposes
its settings as the same system properties without a ``SparkSubmit`` command line: all of
them count as submitted.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

#: spark-submit options and the property each sets (SparkSubmitArguments / SparkSubmit's
#: OptionAssigner list, Spark 4.2; "Submitting Applications" and "Spark Configuration").
SUBMIT_OPTION_KEYS: Mapping[str, str] = {
    "--master": "spark.master",
    "--deploy-mode": "spark.submit.deployMode",
    "--name": "spark.app.name",
    "--jars": "spark.jars",
    "--packages": "spark.jars.packages",
    "--exclude-packages": "spark.jars.excludes",
    "--repositories": "spark.jars.repositories",
    "--files": "spark.files",
    "--archives": "spark.archives",
    "--py-files": "spark.submit.pyFiles",
    "--driver-memory": "spark.driver.memory",
    "--driver-cores": "spark.driver.cores",
    "--driver-java-options": "spark.driver.extraJavaOptions",
    "--driver-class-path": "spark.driver.extraClassPath",
    "--driver-library-path": "spark.driver.extraLibraryPath",
    "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores",
    "--num-executors": "spark.executor.instances",
    "--total-executor-cores": "spark.cores.max",
    "--queue": "spark.yarn.queue",
    "--principal": "spark.kerberos.principal",
    "--keytab": "spark.kerberos.keytab",
}
#: Options that take a value but set no property the job reads.
_OTHER_VALUE_OPTIONS = frozenset({"--class", "--properties-file", "--proxy-user", "--kill",
                                  "--status", "--remote"})
_CONF_OPTIONS = frozenset({"--conf", "-c"})
_SWITCHES = frozenset({"--help", "-h", "--supervise", "--usage-error", "--verbose", "-v",
                       "--version"})

#: What spark-submit sets when it was not told: not a choice of the user's.
_LAUNCHER_DEFAULT_MASTER = "local[*]"

#: Settings read only when the driver JVM starts: too late once spark-submit started it.
LAUNCH_ONLY_KEYS = frozenset({"spark.driver.memory", "spark.driver.extraJavaOptions",
                              "spark.driver.extraClassPath", "spark.driver.extraLibraryPath",
                              "spark.jars"})

_SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"


@dataclass(frozen=True)
class SubmitArgs:
    """spark-submit's arguments up to the application: properties it names, and the app."""

    named: dict[str, str] = field(default_factory=dict)
    primary: str | None = None


def parse_submit_args(args: Sequence[str]) -> SubmitArgs:
    """Parse spark-submit's arguments the way its SparkSubmitOptionParser does: options with a
    value (``--opt v`` or ``--opt=v``), switches, then the primary resource, after which
    everything is the application's (``jobs/stream.py --conf-file …`` is not ``--conf``)."""
    named: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg, value = args[i], None
        if arg.startswith("--") and "=" in arg:
            arg, value = arg.split("=", 1)
        takes_value = arg in SUBMIT_OPTION_KEYS or arg in _CONF_OPTIONS \
            or arg in _OTHER_VALUE_OPTIONS
        if takes_value:
            if value is None:
                i += 1
                value = args[i] if i < len(args) else ""
            if arg in _CONF_OPTIONS:
                key, _, conf_value = value.partition("=")
                named[key.strip()] = conf_value
            elif arg in SUBMIT_OPTION_KEYS:
                named[SUBMIT_OPTION_KEYS[arg]] = value
        elif arg in _SWITCHES or arg.startswith("-"):
            pass  # a switch (or an option this Spark does not know: spark-submit refuses it)
        else:
            return SubmitArgs(named, arg)  # the application (pyspark-shell for a shell)
        i += 1
    return SubmitArgs(named, None)


def submitted_by_jvm(system_properties: Mapping[str, str],
                     java_command: str | None) -> dict[str, str]:
    """The ``spark.*`` settings of a running driver JVM that its launcher was given.

    With a SparkSubmit command line, spark-submit's two defaults (``spark.master`` local[*],
    ``spark.app.name`` the script's file name) count only when the command line names them;
    a properties file's values count (their value differs from the default). Without one,
    everything counts. The command line is split on blanks, so only keys are read from it,
    values always from the properties.
    """
    spark = {k: v for k, v in system_properties.items() if k.startswith("spark.")}
    tokens = (java_command or "").split()
    if not tokens or tokens[0] != _SPARK_SUBMIT_CLASS:
        return spark
    args = parse_submit_args(tokens[1:])
    named = args.named.keys()
    if "spark.master" not in named and spark.get("spark.master") == _LAUNCHER_DEFAULT_MASTER:
        del spark["spark.master"]
    if ("spark.app.name" not in named and args.primary is not None
            and spark.get("spark.app.name") == PurePath(args.primary).name):
        del spark["spark.app.name"]
    return spark


@dataclass(frozen=True)
class Launch:
    """What the launcher set, and whether the driver JVM is already running."""

    submitted: dict[str, str]
    driver_running: bool


@dataclass(frozen=True)
class SessionConf:
    """The session's settings and where each came from."""

    conf: dict[str, str]
    from_launcher: frozenset[str]
    not_applied: dict[str, str]  # conf's launch-time settings the running driver cannot take


def merge(conf: Mapping[str, str], launch: Launch) -> SessionConf:
    """The precedence rule: submitted settings win, conf fills what is unset, except the
    launch-time settings once the driver JVM runs (they would be shown but never applied)."""
    merged = dict(launch.submitted)
    not_applied: dict[str, str] = {}
    for key, value in conf.items():
        if key in merged:
            continue
        if launch.driver_running and key in LAUNCH_ONLY_KEYS:
            not_applied[key] = value
            continue
        merged[key] = value
    return SessionConf(merged, frozenset(launch.submitted), not_applied)


def read_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """Read what the launcher set, before any session exists (attaches to spark-submit's
    gateway when there is one; never starts a JVM of its own)."""
    env = os.environ if environ is None else environ
    if "PYSPARK_GATEWAY_PORT" in env:
        from pyspark import SparkContext

        SparkContext._ensure_initialized()  # attaches to the launcher's gateway
        jvm = SparkContext._jvm
        assert jvm is not None
        props = jvm.System.getProperties()
        values = {str(k): str(props.get(k)) for k in props.keySet()
                  if str(k).startswith("spark.")}
        return Launch(submitted_by_jvm(values, jvm.System.getProperty("sun.java.command")),
                      driver_running=True)
    submit_args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    return Launch(parse_submit_args(submit_args).named, driver_running=False)
