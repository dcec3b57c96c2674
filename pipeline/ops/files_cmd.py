"""``urbpipe files``: each Adabas file's status as the job keeps it — active, stale (why, since
when), dropped; the truncate cut-off; the record layout its typed tables are decoded with.

Sources (small tables, read without Spark): ``file_status`` (one row per transition; a file's
status is its row with the greatest version), ``layouts`` (one row per GFFT the replicator
sent: the layout versions, newest by creation time) and the conf's ``layouts`` (the format
buffer and the typed tables). A file is named by (dbid, fnr): a subscription may span
several databases. A stale file is a problem (exit 1): its typed tables may differ from
Adabas until a resync (docs/runbook.md, "UrbpipeFileStale").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pipeline.config import Settings
from pipeline.ops.lake import Lake

_STATUS_COLUMNS = ["dbid", "fnr", "status", "stale_kinds", "reason", "since", "file_name",
                   "version", "truncated_before", "updated_at"]
_LAYOUT_COLUMNS = ["subscription", "dbid", "fnr", "gfid", "created", "field_count"]


@dataclass
class FileView:
    """One file: its status, and the layouts that decode it."""

    dbid: int
    fnr: int
    status: str = "active"
    stale_kinds: list[str] = field(default_factory=list)
    reason: str = ""
    since: datetime | None = None
    file_name: str = ""
    truncated_before: datetime | None = None
    typed_tables: list[str] = field(default_factory=list)  # current_<sub>_<fnr> of conf
    format_buffer: bool = False
    gfft_versions: int = 0
    newest_gfid: str | None = None
    newest_created: datetime | None = None
    newest_fields: int | None = None

    @property
    def is_problem(self) -> bool:
        return self.status == "stale"

    def layout(self) -> str:
        parts = []
        if self.gfft_versions:
            when = self.newest_created.strftime("%Y-%m-%d %H:%M:%S") if self.newest_created \
                else "?"
            parts.append(f"GFFT {self.newest_gfid} of {when} ({self.newest_fields} fields; "
                         f"{self.gfft_versions} version(s) seen)")
        if self.format_buffer:
            parts.append("conf format buffer")
        return " + ".join(parts) or "none (raw tables only)"

    def as_dict(self) -> dict[str, Any]:
        out = {k: v.isoformat() if isinstance(v, datetime) else v
               for k, v in asdict(self).items()}
        out["problem"] = self.is_problem
        return out


def load_files(settings: Settings, lake: Lake) -> list[FileView]:
    """Every file the conf, ``file_status`` or ``layouts`` knows, by (dbid, fnr)."""
    files: dict[tuple[int, int], FileView] = {}

    def of(dbid: int, fnr: int) -> FileView:
        return files.setdefault((dbid, fnr), FileView(dbid, fnr))

    for lay in settings.layouts:
        view = of(lay.dbid, lay.fnr)
        view.typed_tables.append(f"current_{lay.table_suffix()}")
        view.format_buffer = view.format_buffer or bool(lay.format_buffer)
    latest: dict[tuple[int, int], dict[str, Any]] = {}
    for row in lake.read("file_status", _STATUS_COLUMNS).to_pylist():
        key = (row["dbid"], row["fnr"])
        if key not in latest or (row["version"] or 0) >= (latest[key]["version"] or 0):
            latest[key] = row
    for (dbid, fnr), row in latest.items():
        view = of(dbid, fnr)
        view.status, view.reason, view.since = row["status"], row["reason"] or "", row["since"]
        view.stale_kinds = [k for k in (row["stale_kinds"] or "").split(",") if k]
        view.file_name, view.truncated_before = row["file_name"] or "", row["truncated_before"]
    versions: dict[tuple[int, int], set[tuple[str, Any]]] = {}
    for row in lake.read("layouts", _LAYOUT_COLUMNS).to_pylist():
        view = of(row["dbid"], row["fnr"])
        versions.setdefault((view.dbid, view.fnr), set()).add((row["gfid"], row["created"]))
        if view.newest_created is None or (row["created"] and row["created"] >
                                           view.newest_created):
            view.newest_gfid, view.newest_created = row["gfid"], row["created"]
            view.newest_fields = row["field_count"]
    for key, seen in versions.items():
        files[key].gfft_versions = len(seen)
    return [files[k] for k in sorted(files)]


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def format_files(files: list[FileView]) -> str:
    if not files:
        return "no files (no layouts in conf, no file status, no GFFT seen)"
    lines = []
    for f in files:
        name = f" {f.file_name}" if f.file_name else ""
        tables = f" → {', '.join(f.typed_tables)}" if f.typed_tables else ""
        head = f"{f.dbid}/{f.fnr}{name}{tables}: {f.status.upper()}"
        if f.status != "active":
            kinds = f" ({', '.join(f.stale_kinds)})" if f.stale_kinds else ""
            head += f"{kinds} since {_when(f.since)}" + (f": {f.reason}" if f.reason else "")
        lines.append(head)
        lines.append(f"    layout: {f.layout()}")
        if f.truncated_before:
            lines.append(f"    truncated: changes before {_when(f.truncated_before)} predate "
                         "a truncate (refresh/define)")
    return "\n".join(lines)
