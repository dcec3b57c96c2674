"""``layouts``: the record layout of each (subscription, dbid, fnr) and its typed tables' names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    model_validator,
)

from pipeline.config.base import Model

if TYPE_CHECKING:
    from pipeline.payload import RecordLayout

TYPED_KEY_COLUMNS = frozenset({
    "subscription", "destination", "epoch", "tsnr", "rsnr", "dsnr", "isn", "record_type",
    "image_type", "commit_time", "origin", "batch_id", "deleted", "verified", "valid_from",
    "valid_to", "is_current", "action", "dbid", "fnr"})


class Layout(Model):
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
