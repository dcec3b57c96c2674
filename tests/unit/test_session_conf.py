"""The precedence rule between spark-submit and conf/, without Spark
(pipeline/spark/engine/launcher.py).

spark-submit's ``--master``, ``--deploy-mode``, ``--jars``, ``--driver-memory`` and ``--conf``
win; conf fills what is unset; spark-submit's own defaults (local[*], the script's name) are
not a choice of the user's. tests/e2e/test_cluster.py proves the same on a real cluster.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config import Settings, load_settings
from pipeline.spark.engine.launcher import (
    Launch,
    merge,
    parse_submit_args,
    read_launch,
    submitted_by_jvm,
)
from pipeline.spark.engine.session import resolve_conf, session_conf

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = "org.apache.spark.deploy.SparkSubmit"


@pytest.fixture(scope="module")
def local_settings() -> Settings:
    return load_settings(ROOT / "conf" / "local.yaml", env={})


def test_parse_reads_spark_submit_options_up_to_the_application() -> None:
    args = parse_submit_args([
        "--master", "spark://127.0.0.1:7077", "--deploy-mode=client", "--driver-memory", "1g",
        "--verbose", "--conf", "spark.executor.memory=1g", "-c", "spark.sql.x=a=b",
        "--jars", "a.jar,b.jar", "--py-files", "dist/pipeline.zip",
        "jobs/stream.py", "--conf-file", "conf/x.yaml", "--master", "nope"])
    assert args.primary == "jobs/stream.py"
    assert args.named == {
        "spark.master": "spark://127.0.0.1:7077", "spark.submit.deployMode": "client",
        "spark.driver.memory": "1g", "spark.executor.memory": "1g", "spark.sql.x": "a=b",
        "spark.jars": "a.jar,b.jar", "spark.submit.pyFiles": "dist/pipeline.zip"}


def test_parse_of_a_shell_submit_and_of_nothing() -> None:
    args = parse_submit_args(["--master", "local[1]", "pyspark-shell"])
    assert args == parse_submit_args(["--master", "local[1]", "pyspark-shell", "--name", "x"])
    assert args.named == {"spark.master": "local[1]"} and args.primary == "pyspark-shell"
    assert parse_submit_args([]).named == {}


def test_spark_submit_defaults_are_not_the_users_choice() -> None:
    props = {"spark.master": "local[*]", "spark.app.name": "stream.py",
             "spark.submit.deployMode": "client", "java.home": "/jvm"}
    assert submitted_by_jvm(props, f"{SUBMIT} /x/jobs/stream.py --conf-file c.yaml") == {
        "spark.submit.deployMode": "client"}
    # named on the command line: they count, even with the default's value
    named = f"{SUBMIT} --master local[*] --name stream.py jobs/stream.py"
    assert submitted_by_jvm(props, named) == {
        k: v for k, v in props.items() if k.startswith("spark.")}


def test_properties_file_values_count_and_other_launchers_count_everything() -> None:
    props = {"spark.master": "yarn", "spark.app.name": "payroll", "spark.executor.memory": "4g"}
    # no --master, --name on the command line: spark-defaults.conf / --properties-file set them
    assert submitted_by_jvm(props, f"{SUBMIT} --properties-file p.conf stream.py") == props
    # a YARN cluster-mode driver (ApplicationMaster), a notebook's gateway: all count
    default = {"spark.master": "local[*]", "spark.app.name": "stream.py"}
    assert submitted_by_jvm(default, "org.apache.spark.deploy.yarn.ApplicationMaster x") \
        == default
    assert submitted_by_jvm(default, None) == default


def test_submitted_wins_and_conf_fills_what_is_unset() -> None:
    conf = {"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.app.name": "urbpipe",
            "spark.sql.shuffle.partitions": "2", "spark.jars": "/j/k.jar"}
    submitted = {"spark.master": "spark://h:7077", "spark.sql.shuffle.partitions": "8"}
    before_jvm = merge(conf, Launch(submitted, driver_running=False))
    assert before_jvm.conf == {**conf, **submitted}
    assert before_jvm.from_launcher == frozenset(submitted) and not before_jvm.not_applied
    # the driver JVM runs already: its memory and class path are fixed, conf's are not shown
    running = merge(conf, Launch(submitted, driver_running=True))
    assert running.conf == {"spark.master": "spark://h:7077", "spark.app.name": "urbpipe",
                            "spark.sql.shuffle.partitions": "8"}
    assert running.not_applied == {"spark.driver.memory": "2g", "spark.jars": "/j/k.jar"}


def test_the_issue_case_spark_submit_master_and_memory_win_over_local_yaml(
        local_settings: Settings) -> None:
    """`spark-submit --master spark://127.0.0.1:7077 --driver-memory 1g` with conf/local.yaml
    gave local[*] and 2g before: conf won."""
    props = {"spark.master": "spark://127.0.0.1:7077", "spark.driver.memory": "1g",
             "spark.app.name": "stream.py", "spark.jars": "file:/opt/j/kafka.jar",
             "spark.submit.deployMode": "client"}
    command = (f"{SUBMIT} --master spark://127.0.0.1:7077 --driver-memory 1g --jars "
               "/opt/j/kafka.jar jobs/stream.py --conf-file conf/local.yaml")
    launch = Launch(submitted_by_jvm(props, command), driver_running=True)
    conf = resolve_conf(local_settings, launch).conf
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.driver.memory"] == "1g"
    assert conf["spark.jars"] == "file:/opt/j/kafka.jar"
    assert conf["spark.app.name"] == local_settings.spark.app_name  # the default was not asked
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"  # conf fills


def test_under_spark_submit_the_conf_jars_dir_need_not_exist(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(f"spark:\n  jars_dir: {tmp_path / 'nowhere'}\n")
    settings = load_settings(conf, env={})
    with pytest.raises(FileNotFoundError, match="make jars"):
        resolve_conf(settings, Launch({}, driver_running=False))
    running = resolve_conf(settings, Launch({"spark.master": "yarn"}, driver_running=True))
    assert "spark.jars" not in running.conf and running.conf["spark.master"] == "yarn"


def test_read_launch_without_a_gateway_reads_pyspark_submit_args() -> None:
    env = {"PYSPARK_SUBMIT_ARGS": "--master 'local[1]' --driver-memory 1g pyspark-shell"}
    assert read_launch(env) == Launch({"spark.master": "local[1]", "spark.driver.memory": "1g"},
                                      driver_running=False)
    assert read_launch({}) == Launch({}, driver_running=False)


def test_the_redaction_regex_covers_the_kafka_secrets() -> None:
    regex = re.compile(session_conf(Settings(), jars=False)["spark.redaction.regex"])
    for key in ("kafka.sasl.jaas.config", "kafka.ssl.truststore.password",
                "kafka.ssl.keystore.key", "kafka.ssl.key.password", "fs.s3a.secret.key",
                "spark.hadoop.fs.s3a.session.token", "fs.s3a.access.key"):
        assert regex.search(key), key
    for key in ("kafka.bootstrap.servers", "kafka.ssl.truststore.location", "spark.master"):
        assert not regex.search(key), key


def test_conf_java_options_reach_the_driver_and_keep_derby_s_home(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("spark:\n  conf:\n    spark.driver.extraJavaOptions: -XX:+UseParallelGC\n")
    settings = load_settings(conf, env={})
    options = session_conf(settings, jars=False)["spark.driver.extraJavaOptions"].split()
    assert options[0] == "-XX:+UseParallelGC"
    assert options[1:] == [f"-Dderby.system.home={settings.location('.run')}"]
    (tmp_path / "plain.yaml").write_text("spark:\n  conf: {}\n")
    plain = session_conf(load_settings(tmp_path / "plain.yaml", env={}), jars=False)
    assert plain["spark.driver.extraJavaOptions"].split() == options[1:]


def test_the_catalog_gives_hive_support_and_the_embedded_metastore(local_settings) -> None:
    """conf/local.yaml (the embedded setup): Hive support on the Derby server beside the lake,
    its client driver on the driver's own class path; a conf without the catalog: neither."""
    conf = session_conf(local_settings)
    assert conf["spark.sql.catalogImplementation"] == "hive"
    url = conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    assert url == f"jdbc:derby://127.0.0.1:1527/{ROOT}/.lake-catalog/metastore_db;create=true"
    assert conf["spark.driver.extraClassPath"].endswith(".jar")
    assert "derbyclient" in conf["spark.driver.extraClassPath"]
    off = load_settings(ROOT / "conf" / "test.yaml", env={})
    assert "spark.sql.catalogImplementation" not in session_conf(off)
    assert "derbyclient" not in session_conf(off).get("spark.driver.extraClassPath", "")
    external = local_settings.model_copy(update={"catalog": local_settings.catalog.model_copy(
        update={"metastore": "spark"})})
    conf = session_conf(external)
    assert conf["spark.sql.catalogImplementation"] == "hive"
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in conf, "spark.conf names it"


def test_a_local_lake_gets_the_probing_log_store_whose_jar_setup_built(
        local_settings: Settings, tmp_path: Path) -> None:
    """Decision 0017: on by default, off with ``hadoop``; a conf that asks for it where its
    jar is missing is refused at start (under spark-submit the driver's class check does)."""
    from pipeline.config import ConfigError
    from pipeline.spark.engine.session import LOG_STORE_CLASS, log_store_conf

    key = "spark.delta.logStore.file.impl"
    assert session_conf(local_settings)[key] == LOG_STORE_CLASS
    hadoop = local_settings.model_copy(update={"stream": local_settings.stream.model_copy(
        update={"delta_log_store": "hadoop"})})
    assert key not in session_conf(hadoop)
    elsewhere = local_settings.model_copy(update={"spark": local_settings.spark.model_copy(
        update={"jars_dir": str(tmp_path)})})
    with pytest.raises(ConfigError, match=r"scripts/setup\.sh"):
        log_store_conf(elsewhere)
    assert log_store_conf(elsewhere, check_jar=False) == {key: LOG_STORE_CLASS}


def test_a_local_master_gets_the_nio_file_system_on_the_drivers_class_path(
        local_settings: Settings, tmp_path: Path) -> None:
    """Decision 0020: on by default for ``local[…]``, off with ``hadoop`` and on a cluster
    master (spark-submit's); its jar on the driver's own class path, where Hadoop looks for
    ``fs.file.impl`` before ``spark.jars`` load; a missing jar is refused at start."""
    from pipeline.config import ConfigError
    from pipeline.spark.engine import localfs
    from pipeline.spark.engine.jars import driver_class_path

    conf = resolve_conf(local_settings, Launch({}, driver_running=False)).conf
    assert [conf[k] for k in localfs.KEYS] == [localfs.FILE_SYSTEM, localfs.FILE_CONTEXT]
    jar = localfs.jar(local_settings)
    assert jar and Path(jar).name.startswith("urbpipe-localfs-")
    assert jar in conf["spark.driver.extraClassPath"].split(":")
    assert jar in driver_class_path(local_settings)  # what the README's recipe passes
    cluster = resolve_conf(local_settings, Launch({"spark.master": "spark://h:7077"},
                                                  driver_running=True)).conf
    assert not set(localfs.KEYS) & set(cluster)
    hadoop = local_settings.model_copy(update={"spark": local_settings.spark.model_copy(
        update={"local_file_system": "hadoop"})})
    conf = resolve_conf(hadoop, Launch({}, driver_running=False)).conf
    assert not set(localfs.KEYS) & set(conf) and localfs.jar(hadoop) is None
    elsewhere = local_settings.model_copy(update={"spark": local_settings.spark.model_copy(
        update={"jars_dir": str(tmp_path)})})
    with pytest.raises(ConfigError, match=r"jvm/localfs"):
        localfs.jar(elsewhere)
