"""The object store settings (``object_store``) and what they become for both clients of an
``s3a://`` lake: Spark's S3A connector and the direct writer's pyarrow S3 file system (this one
against a real S3 server, moto on 127.0.0.1), all without Spark."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from pipeline.config import ConfigError, Settings, load_settings
from pipeline.objectstore import (
    ABORTABLE_MANAGER,
    ENV_PROVIDER,
    access,
    delta_uri,
    pyarrow_path,
    spark_conf,
)
from tests.conftest import S3Server


def _settings(tmp_path: Path, **sections: dict) -> Settings:
    path = tmp_path / "conf.yaml"
    path.write_text(yaml.safe_dump(sections))
    return load_settings(path, env={})


def _s3a(tmp_path: Path, store: dict | None = None, **stream: str) -> Settings:
    return _settings(tmp_path, stream={"lake_dir": "s3a://lake/adabas",
                                       "checkpoint_dir": "s3a://lake/_ck/stream", **stream},
                     object_store=store or {})


def test_endpoint_path_style_and_env_credentials_become_s3a_settings(tmp_path: Path) -> None:
    s = _s3a(tmp_path, {"endpoint": "http://127.0.0.1:9000/", "path_style_access": True})
    conf = spark_conf(s, env={})
    assert conf == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider": ENV_PROVIDER,
        "spark.sql.streaming.checkpointFileManagerClass": ABORTABLE_MANAGER}


def test_aws_itself_default_chain_and_rename_manager(tmp_path: Path) -> None:
    s = _s3a(tmp_path, {"credentials": "default", "checkpoint_manager": "rename",
                        "region": "eu-central-1"})
    assert spark_conf(s, env={}) == {"spark.hadoop.fs.s3a.path.style.access": "false",
                                     "spark.hadoop.fs.s3a.endpoint.region": "eu-central-1"}


def test_endpoint_and_region_from_the_environment_when_conf_has_none(tmp_path: Path) -> None:
    s = _s3a(tmp_path)
    a = access(s, env={"AWS_ENDPOINT_URL": "https://minio.internal:9000",
                       "AWS_DEFAULT_REGION": "eu-west-1"})
    assert (a.endpoint, a.region, a.path_style) == ("https://minio.internal:9000", "eu-west-1",
                                                    False)
    assert access(s, env={"AWS_ENDPOINT_URL_S3": "http://s3:1", "AWS_ENDPOINT_URL": "http://x:2"}
                  ).endpoint == "http://s3:1"
    assert access(s, env={}).endpoint is None and access(s, env={}).region is None
    with pytest.raises(ConfigError, match="AWS_ENDPOINT_URL: endpoint 'minio:9000'"):
        access(s, env={"AWS_ENDPOINT_URL": "minio:9000"})


def test_a_local_lake_needs_no_s3a_settings(tmp_path: Path) -> None:
    s = _settings(tmp_path, object_store={"endpoint": "http://127.0.0.1:9000"})
    assert not s.on_object_store() and spark_conf(s, env={}) == {}
    only_ck = _settings(tmp_path, stream={"checkpoint_dir": "s3a://b/ck"})
    assert only_ck.on_object_store()
    lake_only = _settings(tmp_path, stream={"lake_dir": "s3a://b/lake"})
    assert "spark.sql.streaming.checkpointFileManagerClass" not in spark_conf(lake_only, env={})


@pytest.mark.parametrize(("section", "message"), [
    ({"object_store": {"endpoint": "http://key:secret@127.0.0.1:9000"}},
     "must not carry credentials"),
    ({"object_store": {"endpoint": "http://127.0.0.1:9000/bucket"}}, "no path"),
    ({"object_store": {"endpoint": "127.0.0.1:9000"}}, "must look like https://host"),
    ({"object_store": {"region": "Frankfurt am Main"}}, "region name"),
    ({"object_store": {"access_key": "AKIA"}}, "Extra inputs are not permitted"),
    ({"spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "x"}}},
     "credentials never come from the conf file"),
    ({"spark": {"conf": {"spark.hadoop.fs.s3a.bucket.lake.access.key": "x"}}},
     "credentials never come from the conf file"),
    ({"spark": {"conf": {"spark.hadoop.delta.enableFastS3AListFrom": "True"}}},
     "NoSuchMethodError"),
])
def test_credentials_never_from_the_file_and_endpoints_checked(tmp_path: Path, section: dict,
                                                               message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _settings(tmp_path, **section)


def test_s3a_uris_map_to_pyarrow_and_delta_rs_names() -> None:
    assert pyarrow_path("s3a://bucket/lake/transactions/") == "bucket/lake/transactions"
    assert delta_uri("s3a://bucket/lake/images") == "s3://bucket/lake/images"
    assert delta_uri("/tmp/lake/images") == "/tmp/lake/images"
    with pytest.raises(ValueError, match="not on an object store"):
        pyarrow_path("s3://bucket/x")


def test_pyarrow_needs_the_environment_credentials(tmp_path: Path) -> None:
    a = access(_s3a(tmp_path, {"endpoint": "http://127.0.0.1:9"}), env={})
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY is not set"):
        a.filesystem(env={"AWS_ACCESS_KEY_ID": "k"})


def test_direct_writer_writes_parquet_to_the_s3_server(tmp_path: Path, s3_server: S3Server,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct writer's file on s3a://, through pyarrow with the conf's endpoint and the
    environment's credentials: the file is there, with the size and rows it reports."""
    import pyarrow.parquet as pq

    from pipeline.spark.land.datafiles import data_files

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    lake = f"s3a://{s3_server.bucket}/unit-{uuid.uuid4().hex[:8]}"
    s = _settings(tmp_path, stream={"lake_dir": lake, "raw_writer": "direct"},
                  object_store={"endpoint": s3_server.endpoint, "path_style_access": True})
    writer = data_files(s)
    assert writer is not None and writer.store is not None
    rows = [{"topic": "t", "partition": 0, "offset": i, "elem_index": 0, "st": "STRT"}
            for i in range(3)]
    out = writer.split({"status_events": rows}, {}, batch_id=7)
    (info,) = out["_files"]
    assert info["table"] == "status_events" and info["rows"] == 3
    fs = writer.store.filesystem()
    name = f"{pyarrow_path(lake)}/status_events/{info['path']}"
    assert fs.get_file_info(name).size == info["size"]
    table = pq.read_table(name, filesystem=fs)
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("batch_id").to_pylist() == [7, 7, 7]


def test_s3a_jars_and_settings_only_for_an_s3a_lake(tmp_path: Path) -> None:
    """spark.jars gets hadoop-aws and the SDK (not what pyspark ships, e.g. Netty) only when
    the lake or checkpoint is on s3a://, and the session conf the S3A settings with them."""
    from pipeline.spark.engine.jars import settings_jars
    from pipeline.spark.engine.session import session_conf

    spark_dir, s3_dir = tmp_path / "spark", tmp_path / "s3"
    for folder, names in ((spark_dir, ["spark-sql-kafka-0-10_2.13-4.2.0.jar",
                                       "urbpipe-localfs-1.jar", "urbpipe-logstore-1.jar"]),
                          (s3_dir, ["hadoop-aws-3.5.0.jar", "s3-2.57.8.jar",
                                    "netty-common-4.1.138.Final.jar"])):
        folder.mkdir()
        for name in names:
            (folder / name).write_bytes(b"")
    local = _settings(tmp_path, spark={"jars_dir": str(spark_dir)},
                      object_store={"jars_dir": str(s3_dir)})
    assert [Path(j).name for j in settings_jars(local)] == [
        "spark-sql-kafka-0-10_2.13-4.2.0.jar", "urbpipe-localfs-1.jar", "urbpipe-logstore-1.jar"]
    lake = _settings(tmp_path, spark={"jars_dir": str(spark_dir)},
                     stream={"lake_dir": "s3a://b/lake"},
                     object_store={"jars_dir": str(s3_dir), "endpoint": "http://127.0.0.1:9"})
    assert [Path(j).name for j in settings_jars(lake)] == [
        "spark-sql-kafka-0-10_2.13-4.2.0.jar", "urbpipe-localfs-1.jar", "urbpipe-logstore-1.jar",
        "hadoop-aws-3.5.0.jar", "s3-2.57.8.jar"]
    conf = session_conf(lake)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9"
    assert "spark.hadoop.fs.s3a.endpoint" not in session_conf(local)
    (s3_dir / "hadoop-aws-3.5.0.jar").unlink()
    with pytest.raises(FileNotFoundError, match="no hadoop-aws"):
        settings_jars(lake)
