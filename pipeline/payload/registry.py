"""Which layout decodes an image of (dbid, fnr): GFFT versions first, the conf as fallback.

:class:`LayoutRegistry` is an immutable value: ``with_gfft``/``with_conf`` return a new
registry, so it can live in Spark state or a broadcast variable without locks, and
``to_dict``/``from_dict`` give a JSON-ready form for checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .gfft import layout_from_gfft
from .layout import LayoutKey, RecordLayout

FileKey = tuple[int, int]


def _frozen(d: dict[FileKey, Any]) -> Mapping[FileKey, Any]:
    return MappingProxyType(d)


@dataclass(frozen=True, eq=False)
class LayoutRegistry:
    """Conf layouts and GFFT layout versions by (dbid, fnr)."""

    conf: Mapping[FileKey, RecordLayout] = field(default_factory=lambda: _frozen({}))
    versions: Mapping[FileKey, tuple[RecordLayout, ...]] = field(
        default_factory=lambda: _frozen({})
    )

    def with_conf(self, dbid: int, fnr: int, layout: RecordLayout) -> LayoutRegistry:
        """The fallback layout of a file (from the conf's format buffer)."""
        return replace(self, conf=_frozen({**self.conf, (dbid, fnr): layout}))

    def with_layout(self, layout: RecordLayout) -> LayoutRegistry:
        """Add a keyed layout version; one with the same key replaces the older arrival."""
        if layout.key is None:
            raise ValueError("a layout version needs a key (dbid, fnr, gfid, created)")
        file = (layout.key.dbid, layout.key.fnr)
        kept = [v for v in self.versions.get(file, ()) if v.key != layout.key]
        ordered = tuple(sorted([*kept, layout], key=lambda v: (v.key.created, v.key.gfid)))  # type: ignore[union-attr]
        return replace(self, versions=_frozen({**self.versions, file: ordered}))

    def with_gfft(self, urbf: Any, columns: Mapping[str, str] | None = None) -> LayoutRegistry:
        """Add the layout a URBF element describes (accepted at any time)."""
        return self.with_layout(layout_from_gfft(urbf, columns))

    def resolve(
        self, dbid: int, fnr: int, *, gfid: str | None = None, at: int | None = None
    ) -> RecordLayout | None:
        """Newest GFFT version of the file (of ``gfid`` when given, created at or before the
        STCK ``at`` when given), else the conf layout, else None."""
        for v in reversed(self.versions.get((dbid, fnr), ())):
            key: LayoutKey = v.key  # type: ignore[assignment]
            if (gfid is None or key.gfid == gfid.strip()) and (at is None or key.created <= at):
                return v
        return self.conf.get((dbid, fnr))

    def to_dict(self) -> dict[str, Any]:
        return {
            "conf": [
                {"dbid": d, "fnr": f, "layout": lay.to_dict()} for (d, f), lay in self.conf.items()
            ],
            "versions": [v.to_dict() for vs in self.versions.values() for v in vs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LayoutRegistry:
        reg = cls()
        for c in data.get("conf", []):
            reg = reg.with_conf(c["dbid"], c["fnr"], RecordLayout.from_dict(c["layout"]))
        for v in data.get("versions", []):
            reg = reg.with_layout(RecordLayout.from_dict(v))
        return reg
