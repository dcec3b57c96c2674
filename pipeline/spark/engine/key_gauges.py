"""What one state call tells the on-call engineer about its key: gauges of the key's state,
the rows it made per kind, and the newest commit it landed per file.

Why here: the state task holds the key's state and the rows it emits, the driver holds
neither. These small dicts travel in the call's metrics row (``STATS_TABLE``) with the
bytes, open gaps and latency times already there, so the metrics cost no extra Spark job:
``pipeline.ops.metrics`` sums them per batch and serves them on Prometheus (labelled by
destination, subscription and file). Engine-free (numpy and the state machine's types).

A file is named ``"<dbid>/<fnr>"`` (the transaction's URBTDBID, the record's URBRFNR): a
subscription may span several databases.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from pipeline.reassembly.column import Column
from pipeline.reassembly.events import TransactionComplete
from pipeline.reassembly.state import KeyState
from pipeline.reassembly.tables import Columns, Rows
from pipeline.urb.stck import stck_to_unix_us


def state_gauges(state: KeyState | None) -> dict[str, Any]:
    """The key's state as gauges: open gaps by state (and the oldest one's opening, Unix
    ms), requests asked and not answered yet (TRAN positions of requested gaps, INST
    requests tracked), whether the storm breaker tripped, and whether the key is idle (the
    replicator's STAT/SUBS answered since the key's last data: nothing was sent since)."""
    if state is None:
        return {"gap_states": {}, "oldest_gap_ms": None, "outstanding": {"TRAN": 0, "INST": 0},
                "storm": 0, "idle": 0}
    gap_states = Counter(g.state for g in state.gaps)
    asked = sum(len(g.missing) for g in state.gaps if g.state == "requested")
    return {"gap_states": dict(gap_states),
            "oldest_gap_ms": min((g.opened_ms for g in state.gaps), default=None),
            "outstanding": {"TRAN": asked, "INST": len(state.inst.tracks)},
            "storm": int(state.storm.tripped),
            "idle": int(state.stat.answered and not state.gaps)}


def row_counts(tables: Rows) -> dict[str, Any]:
    """The call's rows an operator counts: alerts by ``kind|severity``, gap transitions by
    state, quarantine rows by source, duplicates dropped, requests by kind."""
    def by(table: str, *names: str) -> dict[str, int]:
        return dict(Counter("|".join(str(row.get(n)) for n in names)
                            for row in tables.get(table, ())))

    return {"alert_kinds": by("alerts", "kind", "severity"), "gap_rows": by("gaps", "state"),
            "quarantine_sources": by("quarantine", "source"),
            "duplicates": len(tables.get("duplicates", ())),
            "request_kinds": by("requests", "kind")}


def floats(column: Column) -> np.ndarray:
    """A numeric column as float64, NaN where a value is None or masked (Unix µs stay exact:
    they are below 2**53)."""
    if isinstance(column, np.ma.MaskedArray):
        return column.astype(np.float64).filled(np.nan)
    return np.asarray(column, dtype=np.float64) if isinstance(column, np.ndarray) else \
        np.array([np.nan if v is None else v for v in column], dtype=np.float64)


def file_commits(columns: Columns | None) -> dict[str, int]:
    """Per file, the newest commit time (Unix µs) of the landed transactions in ``columns``
    that changed a record of it: each record joined to its transaction by (epoch, tsnr), in
    numpy (a busy key's call lands ~20 records per message)."""
    if not columns:
        return {}
    tx, rec = columns["transactions"], columns["records"]
    if not len(rec["fnr"]) or not len(tx["tsnr"]):
        return {}

    def ident(epoch: Column, tsnr: Column) -> np.ndarray:
        return np.asarray(epoch, dtype=np.int64) * (1 << 33) + np.asarray(tsnr, dtype=np.int64)

    tx_ids = ident(tx["epoch"], tx["tsnr"])
    order = np.argsort(tx_ids, kind="stable")
    at = np.searchsorted(tx_ids[order], ident(rec["epoch"], rec["tsnr"]))
    which = order[np.clip(at, 0, len(order) - 1)]
    commit = floats(tx["commit_time"])[which]
    files = np.asarray(tx["dbid"], dtype=np.int64)[which] * 65536 + np.asarray(
        rec["fnr"], dtype=np.int64)
    out: dict[str, int] = {}
    for code in np.unique(files):
        newest = np.nanmax(commit[files == code]) if np.any(~np.isnan(commit[files == code])) \
            else np.nan
        if not np.isnan(newest):
            out[f"{int(code) >> 16}/{int(code) & 0xFFFF}"] = int(newest)
    return out


def event_commits(events: Iterable[Any], tod_offset_us: int = 0) -> dict[str, int]:
    """:func:`file_commits` of the machine's landed transactions (events)."""
    out: dict[str, int] = {}
    for e in events:
        if isinstance(e, TransactionComplete) and e.commit_time:
            commit = stck_to_unix_us(e.commit_time, tod_offset_us)
            for fnr in {r.fnr for r in e.records}:
                name = f"{e.dbid}/{fnr}"
                out[name] = max(out.get(name, commit), commit)
    return out


def newest(*found: Mapping[str, int]) -> dict[str, int]:
    """The newest commit per file over several :func:`file_commits`."""
    out: dict[str, int] = {}
    for part in found:
        for name, commit in part.items():
            out[name] = max(out.get(name, commit), commit)
    return out
