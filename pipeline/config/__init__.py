"""Typed, validated configuration: the one place every setting of the product is read from.

A YAML file (``conf/local.yaml`` is the embedded default) is loaded, environment overrides are
applied on top (for secrets and hosts that must not live in a file), and the result is validated
into frozen pydantic models. An invalid file fails at start with ONE line that names the key and
the problem (``ConfigError``), never with a stack trace from deep inside Spark.

Environment overrides: ``URBPIPE__<SECTION>__<KEY>[__<KEY>…]=value`` sets the nested key, e.g.
``URBPIPE__KAFKA__BOOTSTRAP_SERVERS=broker1:9093`` or ``URBPIPE__KAFKA__SASL_PASSWORD=…``. Values
are parsed as YAML scalars, so ``true``, ``42`` and ``[a, b]`` work. ``URBPIPE_CONF`` names the
file when no path is given.

One module per concern, every name re-exported here (``from pipeline.config import …``):
``base`` (the frozen model, intervals, sizes), ``kafka``, ``source`` (topics, replicator,
subscriptions), ``stream`` (gaps, initial state, watermark, stream), ``operations``
(maintenance, spark, object store, catalog, alertmanager), ``layouts``, ``settings`` (all
sections as one) and ``loading`` (YAML, environment overrides, one-line errors).
"""

from pipeline.config.base import DNAM, ENV_PREFIX, INTERVAL, Model, interval_ms, parse_size
from pipeline.config.kafka import Kafka
from pipeline.config.layouts import TYPED_KEY_COLUMNS, Layout, typed_table_suffix
from pipeline.config.loading import DEFAULT_CONF, load_settings
from pipeline.config.operations import (
    DEFAULT_RUNBOOK_URL,
    OBJECT_STORE_SCHEMES,
    Alertmanager,
    Catalog,
    LocalMetastore,
    Maintenance,
    ObjectStore,
    Reconcile,
    SparkSettings,
    SqlServer,
    endpoint_url,
)
from pipeline.config.settings import Settings, bind_layouts
from pipeline.config.source import (
    DEFAULT_DBID,
    Replicator,
    Subscription,
    SubscriptionFile,
    Topics,
    check_files_once,
    file_keys,
)
from pipeline.config.stream import Gaps, InitialState, Stream, Watermark
from pipeline.config_error import ConfigError

__all__ = [
    "DEFAULT_CONF",
    "DEFAULT_DBID",
    "DEFAULT_RUNBOOK_URL",
    "DNAM",
    "ENV_PREFIX",
    "INTERVAL",
    "OBJECT_STORE_SCHEMES",
    "TYPED_KEY_COLUMNS",
    "Alertmanager",
    "Catalog",
    "ConfigError",
    "Gaps",
    "InitialState",
    "Kafka",
    "Layout",
    "LocalMetastore",
    "Maintenance",
    "Model",
    "ObjectStore",
    "Reconcile",
    "Replicator",
    "Settings",
    "SparkSettings",
    "SqlServer",
    "Stream",
    "Subscription",
    "SubscriptionFile",
    "Topics",
    "Watermark",
    "bind_layouts",
    "check_files_once",
    "endpoint_url",
    "file_keys",
    "interval_ms",
    "load_settings",
    "parse_size",
    "typed_table_suffix",
]
