"""Typed, validated configuration: the one place every setting of the product is read from.

A YAML file (``conf/local.yaml`` is the embedded default) is loaded, environment overrides are
applied on top (for secrets and hosts that must not live in a file), and the result is validated
into frozen pydantic models. An invalid file fails at start with ONE line that names the key and
the problem (``ConfigError``), never with a stack trace from deep inside Spark.

Environment overrides: ``URBPIPE__<SECTION>__<KEY>[__<KEY>…]=value`` sets the nested key, e.g.
``URBPIPE__KAFKA__BOOTSTRAP_SERVERS=broker1:9093`` or ``URBPIPE__KAFKA__SASL_PASSWORD=…``. Values
are parsed as YAML scalars, so ``true``, ``42`` and ``[a, b]`` work. ``URBPIPE_CONF`` names the
file when no path is given.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline import kafka_security
from pipeline.config_error import ConfigError
from pipeline.reassembly.config import MAX_INST_DESTINATIONS

if TYPE_CHECKING:
    from pipeline.payload import RecordLayout

ENV_PREFIX = "URBPIPE__"
DEFAULT_CONF = Path(__file__).resolve().parent.parent / "conf" / "local.yaml"
_DNAM = re.compile(r"^[A-Za-z0-9@#$_.-]{1,8}$")
_INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|minutes?|min)$")
_INTERVAL_UNIT_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000,
                     "seconds": 1000, "min": 60_000, "minute": 60_000, "minutes": 60_000}


def interval_ms(text: str) -> float:
    """A trigger interval as conf accepts it (``'5 seconds'``, ``'500 ms'``, ``'1 minute'``)
    in milliseconds."""
    match = _INTERVAL.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an interval like '5 seconds', '500 ms', '1 minute'")
    return float(match[1]) * _INTERVAL_UNIT_MS[match[2]]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: The roles a secured local broker's SCRAM user can have; each is a set of ACLs derived from
#: ``topics`` (devtools/broker_security.py, ``acl_plan``; the table in conf/README.md).
BrokerRole = Literal["job", "replicator", "reader"]
_BROKER_USER = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class BrokerSecurity(_Model):
    """TLS, authentication and ACLs for the local broker (``local_broker.security``).

    When enabled the broker listens only on a SASL_SSL port (SCRAM) and an SSL port with client
    certificates (mutual TLS), has the standard authorizer with no ACL meaning no access, and
    ``admin`` as its only super user besides itself. Passwords and keys are made at the first
    start and live in ``<data_dir>/secure`` (mode 0600), never in this file.
    """

    enabled: bool = False
    sasl_ssl_port: int = Field(9094, ge=1024, le=65535)
    ssl_port: int = Field(9095, ge=1024, le=65535)
    # SCRAM users besides admin (each also gets a client certificate CN=<name>) → their role
    users: dict[str, BrokerRole] = Field(
        default_factory=lambda: {"job": "job", "replicator": "replicator", "nowrite": "reader"})
    cert_days: int = Field(30, ge=1, le=3650)

    @field_validator("users")
    @classmethod
    def _user_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _BROKER_USER.match(name) or name in ("admin", "broker"):
                raise ValueError(f"user {name!r}: a lower-case name (letters, digits, - and _) "
                                 "other than admin and broker, which the broker keeps for itself")
        return value


class LocalBroker(_Model):
    """The single-node KRaft broker the project starts itself (demo, tests, benchmarks)."""

    port: int = Field(9092, ge=1024, le=65535)
    controller_port: int = Field(9093, ge=1024, le=65535)
    data_dir: str = ".kafka"
    heap: str = "512m"
    max_message_bytes: int = Field(2_097_152, ge=1_048_576)
    # of the topics the job does not read (requests, alerts); its source topics get one
    partitions: int = Field(1, ge=1, le=64)
    security: BrokerSecurity = BrokerSecurity()

    @model_validator(mode="after")
    def _ports_differ(self) -> LocalBroker:
        ports = [self.controller_port, self.port]
        if self.security.enabled:  # the PLAINTEXT port is not opened then
            ports[1:] = [self.security.sasl_ssl_port, self.security.ssl_port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"the broker's ports must differ: {ports}")
        return self


class Kafka(_Model):
    """Connection to the Kafka cluster that carries replicator output and requests.

    Security keys are flat, and both client families get them through ONE translation
    (``pipeline/kafka_security.py``): ``confluent()`` for librdkafka, ``spark()`` for the Java
    client. Secrets are ``SecretStr`` (never printed by repr) or read from ``*_file``.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI",
                            "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: str | None = None
    sasl_kerberos_service_name: str = "kafka"
    sasl_kerberos_principal: str | None = None
    sasl_kerberos_keytab: str | None = None
    sasl_oauthbearer_token_endpoint_url: str | None = None
    sasl_oauthbearer_client_id: str | None = None
    sasl_oauthbearer_client_secret: SecretStr | None = None
    sasl_oauthbearer_client_secret_file: str | None = None
    sasl_oauthbearer_scope: str | None = None
    ssl_ca_location: str | None = None
    ssl_truststore_location: str | None = None
    ssl_truststore_type: Literal["JKS", "PKCS12", "PEM"] | None = None
    ssl_truststore_password: SecretStr | None = None
    ssl_truststore_password_file: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    ssl_key_password_file: str | None = None
    ssl_keystore_location: str | None = None
    ssl_keystore_type: Literal["JKS", "PKCS12", "PEM"] | None = None
    ssl_keystore_password: SecretStr | None = None
    ssl_keystore_password_file: str | None = None
    ssl_endpoint_identification: bool = True
    # Spark's Kafka source names its consumer groups <prefix>-<uuid>…: the prefix an ACL
    # on consumer groups can name (README, "Secured Kafka").
    group_id_prefix: str = Field("spark-kafka-source", min_length=1)
    client_options: dict[str, str] = Field(default_factory=dict)
    java_client_options: dict[str, str] = Field(default_factory=dict)
    local_broker: LocalBroker = LocalBroker()

    @field_validator("java_client_options")
    @classmethod
    def _java_names(cls, value: dict[str, str]) -> dict[str, str]:
        prefixed = sorted(k for k in value if k.startswith("kafka."))
        if prefixed:
            raise ValueError(f"{prefixed[0]}: give Java client names without the kafka. "
                             "prefix (the job adds it)")
        return value

    @model_validator(mode="after")
    def _security_complete(self) -> Kafka:
        kafka_security.check(self)
        return self

    def confluent(self) -> dict[str, str]:
        """Options for confluent-kafka (librdkafka names); reads ``*_file`` secrets now."""
        return kafka_security.librdkafka(self)

    def spark(self) -> dict[str, str]:
        """Options for Spark's Kafka source and sink (``kafka.``-prefixed Java client names);
        reads ``*_file`` secrets and the PEM client certificate and key now."""
        return {f"kafka.{k}": v for k, v in kafka_security.java(self).items()}


class Topics(_Model):
    """Topic names, and which replicator destination each output topic carries.

    The URBT does not carry the destination name, so the job learns it from this mapping.
    """

    outputs: dict[str, str] = Field(default_factory=lambda: {"urb.out1": "OUT1"})
    output_pattern: str | None = None
    pattern_destination: str | None = None
    requests: str = "urb.requests"
    replies: str = "urb.replies"
    alerts: str = "urb.alerts"
    control: str = "urb.control"  # operator commands to the job (urbpipe gaps resume)

    @field_validator("outputs")
    @classmethod
    def _destinations_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        for topic, dnam in value.items():
            if not _DNAM.match(dnam):
                raise ValueError(f"destination {dnam!r} of topic {topic!r} is not a 1-8 "
                                 "character replicator name")
        return value

    @model_validator(mode="after")
    def _source_defined(self) -> Topics:
        if not self.outputs and not self.output_pattern:
            raise ValueError("give outputs (topic: destination) or output_pattern")
        if self.output_pattern and not self.pattern_destination:
            raise ValueError("output_pattern needs pattern_destination")
        return self

    def all_created(self) -> list[str]:
        """Topics the local broker creates: outputs, replies, requests, alerts, control."""
        names = [*self.outputs, self.replies, self.requests, self.alerts, self.control]
        return list(dict.fromkeys(names))


class Replicator(_Model):
    """How the job addresses the Event Replicator Server through its input queue."""

    reply_destination: str = "REPLY"
    request_token: str = "URBPIPE"
    ebcdic: bool = True
    big_endian: bool = True
    codepage: Literal["cp037", "cp500", "cp273", "cp1140", "cp1047"] = "cp037"
    # The replicator's STCK times are "machine time" (seed 001, "About Output Message Time
    # Stamps"): the TOD clock may include leap seconds and may be set to local time. Every
    # time column, metric and evidence comparison subtracts both (pipeline/urb/stck.py).
    tod_leap_seconds: int = Field(0, ge=0, le=100)
    tod_utc_offset: str = "+00:00"

    @field_validator("tod_utc_offset")
    @classmethod
    def _utc_offset(cls, value: str) -> str:
        if not re.match(r"^[+-](0\d|1[0-4]):[0-5]\d$", value.strip()):
            raise ValueError("must look like '+01:00' or '-05:00' (the TOD clock's offset "
                             "from UTC)")
        return value.strip()

    @property
    def tod_offset_us(self) -> int:
        """Microseconds to subtract from a STCK time to get UTC: leap seconds and offset."""
        sign = -1 if self.tod_utc_offset.startswith("-") else 1
        hours, minutes = self.tod_utc_offset[1:].split(":")
        offset_s = sign * (int(hours) * 3600 + int(minutes) * 60)
        return (self.tod_leap_seconds + offset_s) * 1_000_000

    @field_validator("reply_destination")
    @classmethod
    def _dnam(cls, value: str) -> str:
        if not _DNAM.match(value):
            raise ValueError("must be a 1-8 character replicator destination name")
        return value

    @field_validator("request_token")
    @classmethod
    def _token(cls, value: str) -> str:
        if not 1 <= len(value) <= 8:
            raise ValueError("must be 1-8 characters (URBIRTOK is 8 bytes)")
        return value


#: The database of a subscription that names none (``dbid``) and lists plain file numbers.
DEFAULT_DBID = 10006


class SubscriptionFile(_Model):
    """One file of a subscription with its database (``SFILE=4,SFDBID=10006`` in seed 000's
    ADARPD SUBSCRIPTION): a subscription may list files of several databases."""

    dbid: int = Field(ge=1, le=65535)
    fnr: int = Field(ge=1, le=65535)


def _pair(item: Any) -> tuple[int, int] | None:
    """(dbid, fnr) of a well-formed ``{dbid, fnr}`` entry of a files list, else None."""
    if isinstance(item, SubscriptionFile):
        return item.dbid, item.fnr
    if isinstance(item, dict) and set(item) == {"dbid", "fnr"} and all(
            isinstance(v, int) and not isinstance(v, bool) for v in item.values()):
        return item["dbid"], item["fnr"]
    return None


def file_keys(dbid: int, files: Sequence[int | SubscriptionFile]) -> tuple[tuple[int, int], ...]:
    """(dbid, fnr) of each entry of a ``files`` list: a plain number is a file of ``dbid``
    (also the simulator's definitions, devtools/sim/model.py)."""
    return tuple((f.dbid, f.fnr) if isinstance(f, SubscriptionFile) else (dbid, f)
                 for f in files)


def check_files_once(keys: Sequence[tuple[int, int]]) -> None:
    """ValueError naming the first (dbid, fnr) a files list names twice."""
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"files lists database {twice[0][0]} file {twice[0][1]} twice")


class Subscription(_Model):
    """A replicator subscription the job expects, and what the simulator generates for it.

    ``files`` lists file numbers of ``dbid`` (the old form, ``[4, 9]``), ``{dbid, fnr}``
    pairs (``[{dbid: 10006, fnr: 4}, {dbid: 10007, fnr: 4}]``), or both. The primary
    database is ``dbid`` when given, else the first the pairs name (``DEFAULT_DBID`` with
    plain numbers only); ``file_keys()`` is the (dbid, fnr) list every reader uses.
    """

    name: str
    destinations: list[str] = Field(default_factory=lambda: ["OUT1"])
    dbid: int = Field(DEFAULT_DBID, ge=1, le=65535)
    files: list[int | SubscriptionFile] = Field(default_factory=lambda: [4], min_length=1)
    ebcdic: bool = True
    images: Literal["after", "before", "both"] = "both"
    resend_buffer: bool = True
    initial_state: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _primary_database(cls, data: Any) -> Any:
        """Without ``dbid`` the primary database is the first the pairs name; plain numbers
        beside pairs need ``dbid`` (which database they are of would be a guess). Pairs of
        the primary database are kept as plain numbers: ``files`` then reads as it always
        did for the files of ``dbid``, and ``file_keys()`` is the same either way."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            return data
        files = data["files"]
        pairs = [_pair(f) for f in files]
        dbid = data.get("dbid")
        if dbid is None:
            named = [p for p in pairs if p is not None]
            if not named:
                return data
            if any(isinstance(f, int) and not isinstance(f, bool) for f in files):
                raise ValueError("files mixes plain file numbers with {dbid, fnr} pairs: give "
                                 "dbid, the database of the plain numbers")
            dbid = named[0][0]
        kept = [p[1] if p is not None and p[0] == dbid else f for f, p in zip(files, pairs,
                                                                               strict=True)]
        return {**data, "dbid": dbid, "files": kept}

    @field_validator("name")
    @classmethod
    def _snam(cls, value: str) -> str:
        if not _DNAM.match(value):
            raise ValueError("must be a 1-8 character subscription name")
        return value

    @field_validator("files", mode="before")
    @classmethod
    def _file_forms(cls, value: Any) -> Any:
        """One clear line for an entry that is neither form (pydantic would report both)."""
        if not isinstance(value, list):
            return value
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int | dict | SubscriptionFile):
                raise ValueError(f"entry {i} ({item!r}) is neither a file number nor "
                                 "{dbid: N, fnr: N}")
            if isinstance(item, dict) and (set(item) != {"dbid", "fnr"} or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in item.values())):
                raise ValueError(f"entry {i} ({item!r}) must be {{dbid: N, fnr: N}}: "
                                 "two numbers")
        return value

    @model_validator(mode="after")
    def _files_once(self) -> Subscription:
        check_files_once(self.file_keys())
        return self

    def file_keys(self) -> tuple[tuple[int, int], ...]:
        """(dbid, fnr) of every file of the subscription, in conf order: plain numbers are
        files of ``dbid``."""
        return file_keys(self.dbid, self.files)

    def databases(self) -> tuple[int, ...]:
        """The databases the subscription's files are in, in conf order, the primary
        (``dbid``) first when it has files."""
        found = dict.fromkeys(d for d, _ in self.file_keys())
        return tuple(sorted(found, key=lambda d: d != self.dbid))

    def files_of(self, dbid: int) -> tuple[int, ...]:
        """The file numbers of database ``dbid`` the subscription lists."""
        return tuple(f for d, f in self.file_keys() if d == dbid)

    @field_validator("initial_state")
    @classmethod
    def _inam(cls, value: str | None) -> str | None:
        if value is not None and not _DNAM.match(value):
            raise ValueError("must be a 1-8 character initial-state definition name (URBIINAM)")
        return value

    @model_validator(mode="after")
    def _inst_tokens(self) -> Subscription:
        # The job's INST tokens name the asking destination in one character (reassembly
        # config.InitialStateTarget.token_for).
        if self.initial_state and len(self.destinations) > MAX_INST_DESTINATIONS:
            raise ValueError(f"with initial_state, at most {MAX_INST_DESTINATIONS} destinations")
        return self


class Gaps(_Model):
    """Gap handling: prior-transaction requests, retries and the landing policy."""

    landing_policy: Literal["immediate", "hold"] = "immediate"
    max_requests_per_gap: int = Field(100, ge=1, le=100_000)
    retry_initial_ms: int = Field(10_000, ge=100)
    retry_multiplier: float = Field(2.0, ge=1.0, le=10.0)
    max_retries: int = Field(3, ge=0, le=100)
    hold_timeout_ms: int = Field(300_000, ge=1_000)
    duplicate_window: int = Field(1024, ge=16, le=1_000_000)
    max_buffered_bytes: int = Field(64 * 1024 * 1024, ge=65_536)
    verdict_wait_ms: int = Field(300_000, ge=0)
    clock_skew_ms: int = Field(5_000, ge=0)
    # A partial transaction is lost once the destination sent messages this much later
    # (URBHTIME); on processing time only after partial_stall_ms (a stalled connector).
    partial_timeout_ms: int = Field(60_000, ge=1_000)
    partial_stall_ms: int = Field(3_600_000, ge=1_000)
    # An idle subscription asks the replicator for its last tsnr (STAT; 0: never).
    stat_interval_ms: int = Field(300_000, ge=0)
    # The storm breaker: more gaps or requested tsnrs than this within the window
    # (replicator time) stop requests for the key until `urbpipe gaps resume`.
    storm_window_ms: int = Field(60_000, ge=1_000)
    storm_max_gaps: int = Field(20, ge=1)
    storm_max_tsnrs: int = Field(2_000, ge=1)
    # A tsnr whose resend the replicator confirmed (TRSP response 0) is asked again, and may
    # be given up, only this long after the confirmation.
    confirmed_wait_ms: int = Field(300_000, ge=1_000)


class InitialState(_Model):
    """INST requests the job sends after a resend, and how long it waits for their replies."""

    max_isns_per_request: int = Field(500, ge=1, le=100_000)
    reply_timeout_ms: int = Field(600_000, ge=1_000)
    # INST messages a (destination, subscription) keeps in flight; the replicator refuses
    # requests beyond its IMAXREQ with INST/ERRO 131/44 (retried after refused_retry_ms,
    # doubling). max_attempts: requests that may ask for the same ISNs (incomplete answers,
    # refusals) before the request is failed (critical alert).
    max_concurrent_requests: int = Field(2, ge=1, le=64)
    max_attempts: int = Field(3, ge=1, le=20)
    refused_retry_ms: int = Field(60_000, ge=1_000)


class Stream(_Model):
    """The streaming job: Kafka source options, trigger, lake and checkpoint locations."""

    lake_dir: str = ".lake"
    catalog_schema: str | None = None
    checkpoint_dir: str = ".run/checkpoints/stream"
    trigger_interval: str = "5 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = Field(20_000, ge=1)
    # A source topic has one partition (the job refuses more: pipeline/ops/topic_check.py),
    # so Spark's Kafka source would read and decode a whole batch in one task on one core.
    # Spark's ``maxRecordsPerPartition`` splits the offset range into tasks of at most this
    # many records, decoded in parallel; the state stage orders each key's rows by offset
    # again, so the split changes no result (decision 0007).
    source_records_per_task: int = Field(5_000, ge=1)
    fail_on_data_loss: bool = True
    shuffle_partitions: int = Field(4, ge=1, le=2000)
    quarantine_poison: bool = True
    # transformWithStateInPandas keeps batch time flat while a huge transaction is open
    # (decision 0005); applyInPandasWithState stays selectable.
    state_api: Literal["applyInPandasWithState", "transformWithStateInPandas"] = (
        "transformWithStateInPandas")
    metrics_file: str = ".run/metrics.jsonl"
    # The state tasks land a key's leading run of plain messages (whole, in-sequence
    # transactions) column-wise (pipeline/reassembly/fast.py): the same rows and state as
    # ``step`` alone, several times cheaper (decision 0009). Off: every message goes through
    # ``step``.
    fast_path: bool = True
    # Table properties of the job's own tables (pipeline/spark/land/tables.py,
    # ``table_properties``).
    # Delta writes a checkpoint every N commits inside the commit that reaches it, and a batch
    # commits four bulk tables: Delta's default of 10 makes every tenth batch write four
    # checkpoints (decision 0011).
    delta_checkpoint_interval: int = Field(50, ge=1, le=10_000)
    # Min/max statistics for the first N columns (the key columns: names, epoch, tsnr …);
    # Delta's default 32 also covers payload-side columns nobody filters on.
    delta_stats_columns: int = Field(8, ge=-1, le=1_000)
    # How long the tables keep their history (every table the product creates, typed ones
    # included; ``lifetime_properties``): the log's commits for time travel and the change
    # feed, and the files a commit removed, which VACUUM may delete only after this.
    # Delta's defaults (30 and 7 days) are the floor of the second: a shorter one would let
    # VACUUM delete a file a reader or a running batch still needs. The first may be a
    # fraction (0.25: 6 hours): each bulk table's log holds retention / trigger commits and
    # Delta lists it at every commit, so a job at a seconds trigger that runs for weeks
    # wants hours here (pipeline/spark/land/log_growth.py; the job warns at start).
    delta_log_retention_days: float = Field(30, ge=1 / 24, le=36_500)
    delta_deleted_file_retention_days: int = Field(7, ge=7, le=36_500)
    # Delta's auto compaction after each commit (``delta.autoOptimize.autoCompact``) on the
    # tables Spark appends to (not ``DIRECT_TABLES``: compaction inside the direct writer's
    # commit would stall the batch; ``urbpipe maintain`` compacts those).
    delta_auto_compact: bool = True
    # Delta Change Data Feed on the current-state typed tables (``current_<sub>_<fnr>``):
    # downstream jobs read what changed since version N (``readChangeFeed``).
    change_feed: bool = True
    # Who writes the bulk tables' data files (pipeline/spark/land/datafiles.py): ``direct`` — the
    # state tasks with pyarrow, committed by the driver through delta-spark; ``spark`` — Spark
    # appends; ``auto`` — direct for a lake on the local file system, Spark otherwise.
    raw_writer: Literal["auto", "direct", "spark"] = "auto"
    prometheus_port: int | None = Field(None, ge=1024, le=65535)
    # Where the endpoint listens: 127.0.0.1 keeps it on the driver's machine; 0.0.0.0 (or the
    # pod's address) lets a cluster's Prometheus scrape the driver (conf/README.md).
    prometheus_address: str = "127.0.0.1"
    # A file is fresh while its newest landed transaction's commit time is at most this old,
    # or its subscription is idle (the STAT probe's answer): the freshness objective the
    # burn-rate alerts of monitoring/prometheus/urbpipe-rules.yml measure.
    freshness_objective_seconds: float = Field(900.0, gt=0)
    gaps: Gaps = Gaps()
    initial_state: InitialState = InitialState()

    @field_validator("prometheus_address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9.:-]{1,253}$", value.strip()):
            raise ValueError("must be an IP address or host name to listen on (0.0.0.0: all)")
        return value.strip()

    @field_validator("trigger_interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if not _INTERVAL.match(value.strip()):
            raise ValueError("must look like '5 seconds', '500 ms' or '1 minute'")
        return value

    @field_validator("starting_offsets")
    @classmethod
    def _offsets(cls, value: str) -> str:
        if value not in ("earliest", "latest") and not value.lstrip().startswith("{"):
            raise ValueError("must be earliest, latest or a JSON offsets object")
        return value


#: Spark/Hadoop keys that hold an object store's secret (also per bucket,
#: ``fs.s3a.bucket.<b>.secret.key``): a conf file is copied, committed and shown, a secret never
#: belongs in one, so these are refused (give them through the environment).
_SECRET_CONF = re.compile(
    r"^(spark\.hadoop\.)?fs\.s3a\.(bucket\.[^.]+\.)?(access\.key|secret\.key|session\.token)$"
    r"|^(spark\.hadoop\.)?fs\.azure\.account\.key(\..+)?$")
#: Delta's S3 start-after listing of ``_delta_log``: broken with the jars the product ships
#: (delta-storage 4.4 calls an S3A listing method hadoop-aws 3.5.0 lacks: ``NoSuchMethodError``
#: at the job's first commit, conf/README.md), so refused at start instead.
_FAST_S3A_LIST = "spark.hadoop.delta.enableFastS3AListFrom"


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes of ``128MB``, ``512 KB``, ``1GB`` or a bare number (binary units, as Delta's
    ``optimize.maxFileSize`` counts)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size like 128MB, 512KB, 1GB")
    return int(match[1]) * _SIZE_UNITS[(match[2] or "b").lower()]


class Maintenance(_Model):
    """Compaction, vacuum and log checkpoints of the job's tables (``urbpipe maintain``,
    ``pipeline.ops.maintain``)."""

    # Which tables: "all" (every table the job writes that exists) or a list of names.
    tables: Literal["all"] | list[str] = "all"
    # Compaction's target: files smaller than this are packed into files of about this size.
    target_file_size: str = "128MB"
    # VACUUM keeps unreferenced files younger than this; never shorter than Delta's 7 days,
    # ``stream.delta_deleted_file_retention_days`` or ``commit_wait_hours``
    # (``pipeline.ops.maintain_plan.vacuum_retention_hours``).
    vacuum_retention_hours: int = Field(168, ge=168)
    # The longest a direct-writer file can wait for its commit: a state task writes it during
    # a batch and the driver commits it at that batch's end, so this is the longest batch.
    # A file younger than this may still be committed: VACUUM must not delete it.
    commit_wait_hours: float = Field(24.0, gt=0)
    # In-job compaction (pipeline/spark/land/maintenance.py, ``InJobMaintenance``): every this
    # many minutes the running job compacts its tables between batches, as many per batch as
    # fit in ``max_pause_seconds`` (plus the one it is on). None: off (``urbpipe maintain``).
    every_minutes: float | None = Field(None, gt=0)
    max_pause_seconds: float = Field(30.0, gt=0)
    # The file watch (pipeline/spark/land/file_watch.py): every this many minutes the job
    # counts each table's data files (from the Delta log) and sends a warning alert
    # (table_files_high, once per table and day) for a table over ``alert_files``: its
    # compaction is not keeping up. None (either): off.
    watch_minutes: float | None = Field(15.0, gt=0)
    alert_files: int | None = Field(5000, ge=1)

    @field_validator("target_file_size")
    @classmethod
    def _size(cls, value: str) -> str:
        if parse_size(value) < 1 << 20:
            raise ValueError("must be at least 1MB")
        return value

    @property
    def target_file_bytes(self) -> int:
        return parse_size(self.target_file_size)


class SparkSettings(_Model):
    """The Spark session: master, memory, extra conf, and where the JVM jars were resolved."""

    master: str = "local[*]"
    app_name: str = "urbpipe"
    driver_memory: str = "2g"
    jars_dir: str = ".jars/spark"
    log_level: Literal["ERROR", "WARN", "INFO", "DEBUG"] = "WARN"
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(k for k in value if _SECRET_CONF.match(k))
        if secret:
            raise ValueError(f"{', '.join(secret)}: credentials never come from the conf file; "
                             "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and "
                             "AWS_SESSION_TOKEN) in the environment of the driver and executors")
        if value.get(_FAST_S3A_LIST, "false").strip().lower() == "true":
            raise ValueError(f"{_FAST_S3A_LIST}: delta-storage 4.4's start-after listing calls "
                             "S3A's Listing.createFileStatusListingIterator with a signature "
                             "hadoop-aws 3.5.0 does not have: the job's first commit would fail "
                             "with NoSuchMethodError. Leave it unset")
        return value


#: URI schemes served by the S3A connector (``object_store``); the job maps them to the
#: s3 file system of pyarrow, which does not know the name ``s3a``.
OBJECT_STORE_SCHEMES = ("s3a",)


class ObjectStore(_Model):
    """The S3-compatible store behind ``s3a://`` lake and checkpoint locations: where it is and
    how it is addressed, never who the job is (credentials come from the environment only).

    Used by Spark's S3A connector (``fs.s3a.*``, ``pipeline.objectstore.spark_conf``) and by
    the direct writer's pyarrow S3 file system in the Python workers, so both reach the same
    store the same way. ``endpoint`` None: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` from
    the environment, else AWS itself. ``checkpoint_manager``: how Spark writes checkpoint
    files there (conf/README.md, "object_store").
    """

    endpoint: str | None = None
    region: str | None = None
    path_style_access: bool = False
    credentials: Literal["environment", "default"] = "environment"
    checkpoint_manager: Literal["abortable", "rename"] = "abortable"
    jars_dir: str = ".jars/s3"

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            endpoint_url(value)
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[a-z0-9-]{2,32}$", value):
            raise ValueError("must be a region name such as eu-central-1")
        return value


def endpoint_url(value: str) -> str:
    """An object-store endpoint as ``http(s)://host[:port]``; ValueError naming what is wrong.
    User info is refused: a key in the URL would be a secret in the conf file."""
    from urllib.parse import urlsplit

    try:
        url = urlsplit(value)
        port = url.port
    except ValueError:
        raise ValueError(f"endpoint {value!r} is not a URL") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"endpoint {value!r} must look like https://host[:port] "
                         "(http:// for a store without TLS)")
    if url.username or url.password:
        raise ValueError("endpoint must not carry credentials: give them through the "
                         "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    if url.path.strip("/") or url.query or url.fragment:
        raise ValueError(f"endpoint {value!r} must name the server only, no path: the bucket "
                         "is part of the s3a:// location")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    return f"{url.scheme}://{host}" + (f":{port}" if port else "")


#: Where monitoring/prometheus/urbpipe-rules.yml and the alerts the job posts send an on-call
#: engineer: docs/runbook.md as your copy of the repository serves it (conf/README.md).
DEFAULT_RUNBOOK_URL = "https://urbpipe.invalid/docs/runbook.md"
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Alertmanager(_Model):
    """The job's own alerts posted to Alertmanager's API (``pipeline.alertmanager``), beside
    the alerts topic and table: a gap's alert fires while it is open or unrecoverable and is
    resolved when it fills (the job) or an operator acknowledges it (``urbpipe gaps ack``)."""

    url: str | None = None
    # Added to every alert posted (e.g. cluster, team); alertname, severity, destination,
    # subscription and the alert's own identity are the job's.
    labels: dict[str, str] = Field(default_factory=lambda: {"job": "urbpipe"})
    # A firing alert's endsAt: it stays firing this long unless resolved before (a gap
    # filled, acknowledged; a breaker resumed) ...
    hold_hours: float = Field(168.0, gt=0)
    # ... and an alert about one event (a rejected request, a lost continuation …) this long.
    event_hours: float = Field(24.0, gt=0)
    timeout_seconds: float = Field(5.0, gt=0, le=120)
    runbook_url: str = DEFAULT_RUNBOOK_URL

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+(/[^\s]*)?$", value):
            raise ValueError("must look like http://alertmanager:9093")
        return value.rstrip("/") if value else value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"label {name!r} is not a Prometheus label name")
        return value


#: Columns every typed change/current-state row carries; a layout's columns must not reuse them.
TYPED_KEY_COLUMNS = frozenset({
    "subscription", "destination", "epoch", "tsnr", "rsnr", "dsnr", "isn", "record_type",
    "image_type", "commit_time", "origin", "batch_id", "deleted", "verified", "valid_from",
    "valid_to", "is_current", "action", "dbid", "fnr"})


class Layout(_Model):
    """The record layout of one (subscription, dbid, fnr): a replicator format buffer, the
    GFFTs the stream sends (``gfft``), or both.

    It turns the file's URBD images into typed columns (``changes_<sub>_<fnr>``,
    ``current_<sub>_<fnr>``, with ``deletes: remove`` ``tombstones_<sub>_<fnr>``, with
    ``history`` ``history_<sub>_<fnr>``); the format buffer is parsed here so a bad one fails
    at start. ``tombstone_retention_days`` (None: for ever) bounds how long a removed ISN keeps
    its delete's version: a change older than the delete arriving later than that revives it.

    ``gfft``: ``prefer`` (default) decodes an image with the subscription's GFFT version that
    applies at its commit time and falls back to the format buffer; ``require`` uses GFFTs
    only (no format buffer allowed); ``ignore`` uses the format buffer only (required).
    Without a format buffer the tables start with their key columns and take the value
    columns from the first GFFT (``pipeline.typed.layouts``).
    """

    subscription: str
    dbid: int = Field(ge=1, le=65535)
    fnr: int = Field(ge=1, le=65535)
    format_buffer: str | None = None
    gfft: Literal["prefer", "ignore", "require"] = "prefer"
    columns: dict[str, str] = Field(default_factory=dict)
    scales: dict[str, int] = Field(default_factory=dict)
    fdt: dict[str, str] = Field(default_factory=dict)
    groups: dict[str, str] = Field(default_factory=dict)
    empty: Literal["keep", "null"] = "keep"
    deletes: Literal["remove", "mark"] = "remove"
    tombstone_retention_days: float | None = Field(30.0, gt=0)
    history: bool = False
    codepage: str | None = None
    # the subscription's primary database, set by Settings (``in_settings``), never by conf
    _primary_dbid: int | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _parses(self) -> Layout:
        if self.gfft == "ignore" and not self.format_buffer:
            raise ValueError("format_buffer is required with gfft: ignore")
        if self.gfft == "require" and self.format_buffer:
            raise ValueError("gfft: require takes the layout from the stream only: "
                             "drop format_buffer, or use gfft: prefer")
        layout = self.conf_layout()
        names = ([i.column for i in layout.items if hasattr(i, "column")] if layout
                 else list(self.columns.values()))
        for name in names:
            # a leading "_" is left to the job's own working columns (pipeline/spark/typed/)
            if name in TYPED_KEY_COLUMNS or not re.match(r"^[a-z][a-z0-9_]*$", name):
                raise ValueError(f"column {name!r} is reserved or not a lower-case identifier")
        if len(set(names)) != len(names):
            raise ValueError("two fields map to the same column")
        return self

    def conf_layout(self) -> RecordLayout | None:
        """The format buffer's layout (None without one); a bad one is a ValueError."""
        from pipeline.payload import LayoutError, layout_from_conf, spark_ddl

        if not self.format_buffer:
            return None
        try:
            layout = layout_from_conf(self.layout_conf())
            spark_ddl(layout)
        except LayoutError as exc:
            raise ValueError(f"format_buffer: {exc}") from None
        return layout

    def layout_conf(self) -> dict[str, Any]:
        """The mapping ``pipeline.payload.layout_from_conf`` takes (needs a format buffer)."""
        return {"format_buffer": self.format_buffer, "columns": self.columns,
                "scales": self.scales, "fdt": self.fdt, "groups": self.groups,
                "dbid": self.dbid, "fnr": self.fnr}

    def table_suffix(self) -> str:
        """The typed tables' name suffix (``typed_table_suffix``), knowing the primary
        database of its subscription from the Settings it belongs to (a Layout made alone
        is taken for a file of the primary database)."""
        return typed_table_suffix(self.subscription, self.dbid, self.fnr, self._primary_dbid)

    @property
    def primary_dbid(self) -> int | None:
        """The primary database of the layout's subscription (None: a Layout made alone)."""
        return self._primary_dbid

    def in_settings(self, primary_dbid: int | None) -> Layout:
        """This layout as a Settings holds it: a copy that knows its subscription's primary
        database (``Settings`` makes them; ``table_suffix`` needs it)."""
        bound = self.model_copy()
        bound._primary_dbid = primary_dbid
        return bound


def typed_table_suffix(subscription: str, dbid: int, fnr: int,
                       primary_dbid: int | None = None) -> str:
    """THE name suffix of the typed tables of (subscription, dbid, fnr), in lower case:
    ``<sub>_<fnr>`` for a file of the subscription's primary database (``primary_dbid``;
    None: taken as primary), so lakes made before subscriptions over several databases keep
    their names; ``<sub>_<dbid>_<fnr>`` for a file of any other database. ``Settings``
    refuses a conf where two files would get one name (``_typed_names_unique``)."""
    name = subscription.lower()
    if primary_dbid is None or dbid == primary_dbid:
        return f"{name}_{fnr}"
    return f"{name}_{dbid}_{fnr}"


class Settings(_Model):
    """Everything the product reads from conf/, validated."""

    kafka: Kafka = Kafka()
    topics: Topics = Topics()
    replicator: Replicator = Replicator()
    subscriptions: list[Subscription] = Field(
        default_factory=lambda: [Subscription(name="COLOR")])
    stream: Stream = Stream()
    spark: SparkSettings = SparkSettings()
    layouts: list[Layout] = Field(default_factory=list)
    object_store: ObjectStore = ObjectStore()
    maintenance: Maintenance = Maintenance()
    alertmanager: Alertmanager = Alertmanager()
    base_dir: str = "."

    @model_validator(mode="after")
    def _subscriptions_routed(self) -> Settings:
        known = set(self.topics.outputs.values())
        if self.topics.pattern_destination:
            known.add(self.topics.pattern_destination)
        for sub in self.subscriptions:
            for dnam in sub.destinations:
                if known and dnam not in known:
                    raise ValueError(f"subscription {sub.name} names destination {dnam}, "
                                     "which no topics.outputs entry carries")
        return self

    @field_validator("layouts")
    @classmethod
    def _layouts_bound(cls, value: list[Layout], info: ValidationInfo) -> list[Layout]:
        return bind_layouts(value, info.data.get("subscriptions") or [])

    @model_validator(mode="after")
    def _layouts_known(self) -> Settings:
        seen: set[tuple[str, int, int]] = set()
        for lay in self.layouts:
            where = f"layout {lay.subscription}/{lay.dbid}/{lay.fnr}"
            sub = self.subscription(lay.subscription)
            if sub is None:
                raise ValueError(f"{where} names a subscription the subscriptions section "
                                 "does not list")
            if (lay.dbid, lay.fnr) not in sub.file_keys():
                raise ValueError(f"{where}: subscription {sub.name} does not list database "
                                 f"{lay.dbid} file {lay.fnr} in its files")
            if (lay.subscription, lay.dbid, lay.fnr) in seen:
                raise ValueError(f"{where} is given twice")
            seen.add((lay.subscription, lay.dbid, lay.fnr))
        return self

    @model_validator(mode="after")
    def _typed_names_unique(self) -> Settings:
        """No two files of any subscriptions may get one typed table name (``COLOR`` and
        ``color``, or ``A`` file 4 of database 7 beside ``A_7`` file 4 of its primary)."""
        owner: dict[str, str] = {}
        for sub in self.subscriptions:
            for dbid, fnr in sub.file_keys():
                suffix = self.table_suffix(sub.name, dbid, fnr)
                here = f"{sub.name}/{dbid}/{fnr}"
                if suffix in owner:
                    raise ValueError(f"subscription files {owner[suffix]} and {here} would "
                                     f"both write the typed tables *_{suffix}: rename a "
                                     "subscription")
                owner[suffix] = here
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> Settings:
        """A copy (pydantic's); new layouts or subscriptions are bound again, so every
        layout's ``table_suffix`` knows its subscription's primary database."""
        copy = super().model_copy(update=update, deep=deep)
        if update and ("layouts" in update or "subscriptions" in update):
            bound = bind_layouts(copy.layouts, copy.subscriptions)
            copy = super(Settings, copy).model_copy(update={"layouts": bound})
        return copy

    def subscription(self, name: str) -> Subscription | None:
        """The configured subscription of this name, None when conf lists none."""
        return next((s for s in self.subscriptions if s.name == name), None)

    def table_suffix(self, subscription: str, dbid: int, fnr: int) -> str:
        """The typed tables' name suffix of a (subscription, dbid, fnr) of this conf
        (``typed_table_suffix`` with the subscription's primary database): for files the
        stream names, when no Layout is at hand."""
        sub = self.subscription(subscription)
        return typed_table_suffix(subscription, dbid, fnr, sub.dbid if sub else None)

    def location(self, value: str) -> str:
        """A location from conf: URIs (s3a://, abfss://, file:/) as given; relative paths
        resolved against base_dir (the project folder for conf/*.yaml)."""
        if "://" in value or value.startswith("file:"):
            return value
        p = Path(value)
        return str(p if p.is_absolute() else (Path(self.base_dir) / p).resolve())

    def on_object_store(self) -> bool:
        """Is the lake or the checkpoint on an ``s3a://`` store (``object_store``)? Then Spark
        needs hadoop-aws and the fs.s3a settings."""
        from urllib.parse import urlparse

        return any(urlparse(self.location(v)).scheme in OBJECT_STORE_SCHEMES
                   for v in (self.stream.lake_dir, self.stream.checkpoint_dir))

    def destination_of(self, topic: str) -> str:
        """The replicator destination a topic the job reads carries."""
        if topic == self.topics.replies:
            return self.replicator.reply_destination
        return self.topics.outputs.get(topic) or self.topics.pattern_destination or topic

    def source_topics(self) -> list[str]:
        """Topics the job subscribes to: the output topics, the reply and control topics."""
        return list(dict.fromkeys([*self.topics.outputs, self.topics.replies,
                                   self.topics.control]))


def bind_layouts(layouts: Sequence[Layout],
                 subscriptions: Sequence[Subscription]) -> list[Layout]:
    """Each layout as a Settings holds it (``Layout.in_settings``): knowing the primary
    database of its subscription (None for a subscription conf does not list)."""
    primary = {s.name: s.dbid for s in subscriptions}
    return [lay.in_settings(primary.get(lay.subscription)) for lay in layouts]


class _DuplicateKey(yaml.YAMLError):
    """A key written twice in one mapping (the message names it and both lines)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in a mapping is refused: the
    plain loader keeps the later value silently, so a second ``kafka:`` block or a repeated
    ``security_protocol`` overrode the first without a word."""

    def construct_document(self, node: yaml.Node) -> Any:
        _refuse_duplicates(node, "")
        return super().construct_document(node)


def _refuse_duplicates(node: yaml.Node, path: str) -> None:
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicates(item, f"{path}[{i}]")
        return
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor`` may repeat
            continue
        name = str(key_node.value)
        key = f"{path}.{name}" if path else name
        line = key_node.start_mark.line + 1
        if name in first_line:
            raise _DuplicateKey(f"key {key!r} is written twice (lines {first_line[name]} "
                                f"and {line})")
        first_line[name] = line
        _refuse_duplicates(value_node, key)


#: env keys whose value is a secret: taken as the literal string, never parsed as YAML (a
#: password ``0123`` or ``true`` must stay what it is)
_LITERAL_ENV = re.compile(r"(password|secret)$")


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name[len(ENV_PREFIX):].split("__") if k]
        node = raw
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: {'.'.join(keys)} does not name a section")
        node[keys[-1]] = value if _LITERAL_ENV.search(keys[-1]) else yaml.safe_load(value)
    return raw


def _one_line(error: ValidationError, source: str) -> str:
    first = error.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{source}: {key}: {msg}{more}"


def load_settings(path: str | Path | None = None,
                  env: Mapping[str, str] | None = None) -> Settings:
    """Load, override from the environment, and validate. Raises ConfigError (one line)."""
    env = os.environ if env is None else env
    conf = Path(path or env.get("URBPIPE_CONF") or DEFAULT_CONF)
    try:
        raw = yaml.load(conf.read_text(), Loader=_UniqueKeyLoader) or {}  # a SafeLoader
    except OSError as exc:
        raise ConfigError(f"{conf}: cannot read: {exc.strerror}") from None
    except _DuplicateKey as exc:
        raise ConfigError(f"{conf}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{conf}:{where} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{conf}: top level must be a mapping of sections")
    raw = _apply_env(raw, env)
    home = conf.resolve().parent
    raw.setdefault("base_dir", str(home.parent if home.name == "conf" else home))
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, str(conf))) from None
