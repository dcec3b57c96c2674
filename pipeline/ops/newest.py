"""The newest rows of a key in a Delta table, read from a few of its files, not all of them.

Why: ``urbpipe status`` answered by reading the whole ``transactions`` and ``status_events``
tables on every call, which grows with the lake. Each data file's add action in the Delta
log carries its modification time and the min/max of its first columns (names, epoch, tsnr:
``stream.delta_stats_columns``; the direct writer writes them too). So, per key:

- :func:`newest_in_sequence`: the files that may hold the key, greatest (max epoch, max tsnr)
  first; a file is read only while its bounds could still beat the best row found. The
  newest transaction in the sequence is usually in the first file read.
- :func:`newest_by_time`: the files that may hold the key, newest first, up to ``max_files``
  of them; the newest row of the first file that holds the key (a batch's files are written
  after the previous batch's).

Only the log (one checkpoint and the commits after it) is read in full; each file read is
cached for the call, and read with only the columns asked for. A file without statistics may
hold anything: it is read first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Key = tuple[str, str]
_INF = float("inf")


@dataclass(frozen=True)
class FileStats:
    """One data file: its path in the table, when it was written, and its column bounds."""

    path: str
    modified_ms: int
    low: dict[str, Any]
    high: dict[str, Any]

    def may_hold(self, values: dict[str, Any]) -> bool:
        """Whether the file may hold rows with these column values (no bound: it may)."""
        for name, value in values.items():
            lo, hi = self.low.get(name), self.high.get(name)
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                return False
        return True

    def bound(self, names: Sequence[str]) -> tuple[float, ...]:
        """The greatest values of ``names`` the file can hold (∞ where unknown)."""
        return tuple(_INF if self.high.get(n) is None else self.high[n] for n in names)


def file_stats(table: Any) -> list[FileStats]:
    """Every data file of the table's current version (a ``deltalake.DeltaTable``)."""
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out = []
    for a in actions:
        low = {k.removeprefix("min."): v for k, v in a.items() if k.startswith("min.")}
        high = {k.removeprefix("max."): v for k, v in a.items() if k.startswith("max.")}
        out.append(FileStats(a["path"], int(a["modification_time"]), low, high))
    return out


class Files:
    """Reads whole files of one table (only ``columns``), each at most once."""

    def __init__(self, table: Any, columns: Sequence[str],
                 where: pc.Expression | None = None) -> None:
        dataset = table.to_pyarrow_dataset()
        self._fragments = {f.path: f for f in dataset.get_fragments()}
        self._schema = dataset.schema
        self._columns, self._where = list(columns), where
        self._read: dict[str, list[dict[str, Any]]] = {}

    def rows(self, path: str) -> list[dict[str, Any]]:
        if path not in self._read:
            fragment = self._fragments.get(path)
            self._read[path] = [] if fragment is None else fragment.to_table(
                schema=self._schema, columns=self._columns, filter=self._where,
                use_threads=False).to_pylist()
        return self._read[path]

    @property
    def files_read(self) -> int:
        return len(self._read)


def _of(key: Key) -> Callable[[dict[str, Any]], bool]:
    return lambda row: (row.get("destination"), row.get("subscription")) == key


def newest_in_sequence(stats: Iterable[FileStats], files: Files, keys: Iterable[Key],
                       order: Sequence[str] = ("epoch", "tsnr")) -> dict[Key, dict[str, Any]]:
    """Per key, its row with the greatest ``order`` values (epoch, then tsnr)."""
    stats = list(stats)
    out: dict[Key, dict[str, Any]] = {}
    for key in keys:
        where = {"destination": key[0], "subscription": key[1]}
        candidates = sorted((f for f in stats if f.may_hold(where)),
                            key=lambda f: f.bound(order), reverse=True)
        best: tuple[Any, ...] | None = None
        for f in candidates:
            if best is not None and f.bound(order) <= best:
                break  # no later file can hold a greater row
            for row in filter(_of(key), files.rows(f.path)):
                found = tuple(row[n] for n in order)
                if best is None or found > best:
                    best, out[key] = found, row
    return out


def newest_by_time(stats: Iterable[FileStats], files: Files, keys: Iterable[Key],
                   time_column: str, max_files: int) -> dict[Key, dict[str, Any]]:
    """Per key, its newest row by ``time_column`` in the newest file holding it, looking at
    no more than ``max_files`` files per key (a key without a row there is left out)."""
    newest_first = sorted(stats, key=lambda f: f.modified_ms, reverse=True)
    out: dict[Key, dict[str, Any]] = {}
    for key in keys:
        where = {"destination": key[0], "subscription": key[1]}
        for f in [f for f in newest_first if f.may_hold(where)][:max_files]:
            rows = [r for r in files.rows(f.path)
                    if _of(key)(r) and r.get(time_column) is not None]
            if rows:
                out[key] = max(rows, key=lambda r: r[time_column])
                break
    return out
