"""``Settings``: every section together, validated as one."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipeline.config.base import Model
from pipeline.config.kafka import Kafka
from pipeline.config.layouts import Layout, typed_table_suffix
from pipeline.config.operations import (
    OBJECT_STORE_SCHEMES,
    Alertmanager,
    Catalog,
    Maintenance,
    ObjectStore,
    Reconcile,
    SparkSettings,
)
from pipeline.config.source import Replicator, Subscription, Topics
from pipeline.config.stream import Stream

#: keys of a subscription only the simulator reads (``devtools.subscriptions.<name>``)
RIG_SUBSCRIPTION_KEYS = ("images", "resend_buffer")
log = logging.getLogger("urbpipe.config")


def move_rig_keys(data: Any) -> Any:
    """Older confs keep rig keys in product sections: ``kafka.local_broker`` and a
    subscription's ``images``/``resend_buffer``. They are still read, moved into
    ``devtools`` with a warning that says where they belong now."""
    if not isinstance(data, dict):
        return data
    rig = dict(data.get("devtools") or {})
    moved: list[str] = []
    kafka = data.get("kafka")
    if isinstance(kafka, dict) and "local_broker" in kafka:
        kafka = dict(kafka)
        rig.setdefault("local_broker", kafka.pop("local_broker"))
        moved.append("kafka.local_broker -> devtools.local_broker")
    subs = []
    for sub in data.get("subscriptions") or []:
        keys = [k for k in RIG_SUBSCRIPTION_KEYS if isinstance(sub, dict) and k in sub]
        if keys:
            rig_subs = dict(rig.get("subscriptions") or {})
            rig_subs[sub.get("name")] = {**{k: sub[k] for k in keys},
                                         **(rig_subs.get(sub.get("name")) or {})}
            rig["subscriptions"] = rig_subs
            sub = {k: v for k, v in sub.items() if k not in keys}
            moved.append(f"subscriptions[{sub.get('name')}].{{{','.join(keys)}}} -> "
                         f"devtools.subscriptions.{sub.get('name')}")
        subs.append(sub)
    if not moved:
        return data
    log.warning("conf: keys only the development rig reads are still read but belong in the "
                "devtools section (conf/README.md): %s", "; ".join(moved))
    out = {**data, "devtools": rig}
    if kafka is not None:
        out["kafka"] = kafka
    if "subscriptions" in data:
        out["subscriptions"] = subs
    return out


class Settings(Model):
    """Everything the product reads from conf/, validated."""

    @model_validator(mode="before")
    @classmethod
    def _rig_keys(cls, data: Any) -> Any:
        return move_rig_keys(data)

    kafka: Kafka = Kafka()
    topics: Topics = Topics()
    replicator: Replicator = Replicator()
    subscriptions: list[Subscription] = Field(
        default_factory=lambda: [Subscription(name="COLOR")])
    stream: Stream = Stream()
    spark: SparkSettings = SparkSettings()
    layouts: list[Layout] = Field(default_factory=list)
    # The development rig's section (simulator, local broker): never read by the job, kept as
    # written and validated by the rig (``devtools.config``).
    devtools: dict[str, Any] = Field(default_factory=dict)
    object_store: ObjectStore = ObjectStore()
    maintenance: Maintenance = Maintenance()
    catalog: Catalog = Catalog()
    reconcile: Reconcile = Reconcile()
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
