"""One S3-compatible object store, reached the same way by Spark's S3A connector (driver and
executors) and by pyarrow's S3 file system (the direct writer in the Python workers).

Why a module of its own: a lake on ``s3a://`` is written by two clients. Spark (Delta's log,
the Spark-appended tables, the checkpoint) reads ``fs.s3a.*`` Hadoop settings; the direct
writer's pyarrow (``pipeline.spark.land.datafiles``) knows neither those settings nor the scheme
name ``s3a``. Both are derived here from ``object_store`` (conf/README.md), so they cannot
disagree about endpoint, region or addressing.

Credentials are never part of the conf: with ``credentials: environment`` both clients take
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``) from the
environment of the process they run in, read there and then (so a task never carries a secret
in its pickled closure); with ``default`` each uses its SDK's default chain (environment,
profile, instance or pod role).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from pipeline.config import OBJECT_STORE_SCHEMES, ConfigError, Settings, endpoint_url

ENV_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
#: Hadoop's name for the SDK v2 provider that reads ENV_CREDENTIALS (and AWS_SESSION_TOKEN).
ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
#: Spark's checkpoint file manager that writes in place through S3A's abortable stream
#: (spark-hadoop-cloud, jvm/s3/pom.xml) instead of write-temporary-then-rename.
ABORTABLE_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
#: Region when a non-AWS endpoint is named and neither conf nor environment gives one: an
#: S3-compatible server ignores it, but both SDKs need one to sign requests.
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Access:
    """Where the store is and how to address it (no secrets: pickled into Python tasks)."""

    endpoint: str | None          # http(s)://host[:port]; None: AWS itself
    region: str | None
    path_style: bool
    credentials: str              # "environment" or "default" (ObjectStore.credentials)

    def filesystem(self, env: Mapping[str, str] | None = None) -> Any:
        """pyarrow's S3 file system for this store, credentials from ``env`` (the worker's
        environment by default) with ``credentials: environment``."""
        from pyarrow import fs

        env = os.environ if env is None else env
        options: dict[str, Any] = {"region": self.region}
        if self.endpoint:
            url = urlparse(self.endpoint)
            options.update(endpoint_override=url.netloc, scheme=url.scheme)
        # pyarrow addresses buckets path-style unless told otherwise
        options["force_virtual_addressing"] = not self.path_style
        if self.credentials == "environment":
            missing = [k for k in ENV_CREDENTIALS if not env.get(k)]
            if missing:
                raise ConfigError(f"object_store.credentials is environment but "
                                  f"{' and '.join(missing)} is not set in this process's "
                                  "environment")
            options.update(access_key=env["AWS_ACCESS_KEY_ID"],
                           secret_key=env["AWS_SECRET_ACCESS_KEY"],
                           session_token=env.get("AWS_SESSION_TOKEN") or None)
        return fs.S3FileSystem(**options)

    def storage_options(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The same store as ``deltalake``/delta-rs ``storage_options`` (to read the lake
        without Spark: tests, DuckDB users)."""
        env = os.environ if env is None else env
        opts: dict[str, str] = {}
        if self.region:
            opts["AWS_REGION"] = self.region
        if self.endpoint:
            opts["AWS_ENDPOINT_URL"] = self.endpoint
            opts["AWS_ALLOW_HTTP"] = str(self.endpoint.startswith("http://")).lower()
        opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not self.path_style).lower()
        for key in (*ENV_CREDENTIALS, "AWS_SESSION_TOKEN"):
            if env.get(key):
                opts[key] = env[key]
        return opts


def access(settings: Settings, env: Mapping[str, str] | None = None) -> S3Access:
    """``object_store`` resolved against the environment: the endpoint from conf, else
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``; the region from conf, else ``AWS_REGION``
    / ``AWS_DEFAULT_REGION``, else us-east-1 for a named endpoint. A bad endpoint in the
    environment is a ConfigError naming the variable."""
    env = os.environ if env is None else env
    store = settings.object_store
    endpoint = store.endpoint
    if endpoint is None:
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
            if env.get(name):
                try:
                    endpoint = endpoint_url(env[name])
                except ValueError as exc:
                    raise ConfigError(f"{name}: {exc}") from None
                break
    else:
        endpoint = endpoint_url(endpoint)
    region = store.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or (
        DEFAULT_REGION if endpoint else None)
    return S3Access(endpoint, region, store.path_style_access, store.credentials)


def spark_conf(settings: Settings, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings an ``s3a://`` lake or checkpoint needs (empty for any other lake):
    the S3A connector pointed at ``object_store``, and the checkpoint file manager."""
    if not settings.on_object_store():
        return {}
    a = access(settings, env)
    h = "spark.hadoop.fs.s3a."
    conf = {f"{h}path.style.access": str(a.path_style).lower()}
    if a.endpoint:
        conf[f"{h}endpoint"] = a.endpoint
        conf[f"{h}connection.ssl.enabled"] = str(a.endpoint.startswith("https://")).lower()
    if a.region:
        conf[f"{h}endpoint.region"] = a.region
    if a.credentials == "environment":
        conf[f"{h}aws.credentials.provider"] = ENV_PROVIDER
    if settings.object_store.checkpoint_manager == "abortable" and is_object_store(
            settings.location(settings.stream.checkpoint_dir)):
        conf["spark.sql.streaming.checkpointFileManagerClass"] = ABORTABLE_MANAGER
    return conf


def is_object_store(location: str) -> bool:
    return urlparse(location).scheme in OBJECT_STORE_SCHEMES


def pyarrow_path(location: str) -> str:
    """``s3a://bucket/key`` as pyarrow's S3 file system names it: ``bucket/key``."""
    url = urlparse(location)
    if url.scheme not in OBJECT_STORE_SCHEMES:
        raise ValueError(f"{location} is not on an object store "
                         f"({', '.join(OBJECT_STORE_SCHEMES)})")
    return f"{url.netloc}{url.path}".rstrip("/")


def delta_uri(location: str) -> str:
    """``s3a://bucket/key`` as delta-rs names it (``s3://bucket/key``)."""
    return "s3://" + pyarrow_path(location) if is_object_store(location) else location
