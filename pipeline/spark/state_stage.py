"""Stateful stage: applyInPandasWithState around the engine-free ``pipeline.reassembly.step``.

Keyed by (destination, subscription). The state is one binary value (``KeyState.to_bytes``);
the output is a narrow, generic row ``(table, json, blob)``: the table it lands in, its columns
as JSON, and its one binary column (image payload, status data, quarantined bytes) kept out of
the JSON. The sinks parse each table's rows with its declared schema.

Determinism matters for exactly-once: ``now`` is the batch's processing time from Spark (stored
in the offset log, so a replayed batch sees the same value), never the wall clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pandas as pd

from pipeline.reassembly import KeyState, ReassemblyConfig, step
from pipeline.reassembly.rows import ElementRow
from pipeline.reassembly.tables import events_to_rows, ms_to_datetime
from pipeline.spark.decode_stage import ERROR_EYE, STCK_FIELDS, WARNING_EYE, unsigned
from pipeline.spark.tables import BLOB_COLUMN

OUTPUT_DDL = "table string, json string, blob binary"
STATE_DDL = "state binary"


def _fields(eye: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    stck = STCK_FIELDS.get(eye, frozenset())
    return {k: (unsigned(v) if k in stck and v is not None else v)
            for k, v in raw.items() if v is not None}


def _payload(value: Any) -> bytes | None:
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None


def split_rows(pdf: pd.DataFrame) -> tuple[list[ElementRow], list[dict[str, Any]]]:
    """Element rows for the machine, and quarantine rows for what the decoder rejected."""
    elements: list[ElementRow] = []
    rejected: list[dict[str, Any]] = []
    for rec in pdf.to_dict("records"):
        eye = rec["eye"]
        if eye in (ERROR_EYE, WARNING_EYE):
            rejected.append({
                "source": "decode" if eye == ERROR_EYE else "decode_warning",
                "destination": rec["destination"], "subscription": rec["subscription"],
                "epoch": None, "tsnr": None, "reason": rec["error"], "topic": rec["topic"],
                "partition": int(rec["partition"]), "offset": int(rec["offset"]),
                "elem_index": -1, "eye": eye, "raw": _payload(rec["raw"]),
                "fields_json": None})
            continue
        elements.append(ElementRow(
            topic=rec["topic"], partition=int(rec["partition"]), offset=int(rec["offset"]),
            elem_index=int(rec["elem_index"]), urbhmsnr=int(rec["urbhmsnr"]),
            urbhtime=unsigned(int(rec["urbhtime"])), eye=eye,
            fields=_fields(eye, rec.get(eye.lower())), payload=_payload(rec.get("payload")),
            data=_payload(rec.get("data"))))
    return elements, rejected


def _jsonable(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return value
    return str(value)


def to_output(tables: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """Flatten table rows into the (table, json, blob) output frame."""
    out_table, out_json, out_blob = [], [], []
    for table, rows in tables.items():
        blob_col = BLOB_COLUMN.get(table)
        for row in rows:
            blob = row.pop(blob_col, None) if blob_col else None
            if table == "alerts":  # nested details land as one JSON string column
                row = {**row, "details": json.dumps(row["details"], sort_keys=True)}
            elif table == "gaps":  # transitions of one batch keep their order
                row = {**row, "seq": len(out_table)}
            out_table.append(table)
            out_json.append(json.dumps(row, separators=(",", ":"), default=_jsonable))
            out_blob.append(blob)
    # object dtype even when empty: an empty list makes a float64 column, which pyarrow turns
    # into a ChunkedArray for string/binary and transformWithStateInPandas then fails.
    return pd.DataFrame({"table": pd.Series(out_table, dtype=object),
                         "json": pd.Series(out_json, dtype=object),
                         "blob": pd.Series(out_blob, dtype=object)})


def batch_output(events: list[Any], rejected: list[dict[str, Any]], now_ms: int) -> pd.DataFrame:
    """One call's output frame: the events' table rows plus the decoder's rejected records,
    quarantined at the batch's processing time (shared by both state APIs)."""
    tables = events_to_rows(events, now_ms)
    for row in rejected:
        row["quarantined_at"] = ms_to_datetime(now_ms)
    tables.setdefault("quarantine", []).extend(rejected)
    return to_output(tables)


def state_function(config: ReassemblyConfig):
    """The function passed to applyInPandasWithState."""

    def reassemble(key: tuple[str, str], frames: Iterator[pd.DataFrame],
                   state: Any) -> Iterator[pd.DataFrame]:
        now_ms = int(state.getCurrentProcessingTimeMs())
        current = KeyState.from_bytes(state.get[0]) if state.exists else None
        elements: list[ElementRow] = []
        rejected: list[dict[str, Any]] = []
        if not state.hasTimedOut:
            for pdf in frames:
                e, r = split_rows(pdf)
                elements.extend(e)
                rejected.extend(r)
        result = step(current, elements, now_ms, config, (key[0], key[1]))
        if result.state is None:
            state.remove()
        else:
            state.update((result.state.to_bytes(),))
        # PySpark keeps an old timeout armed unless every call sets or clears it.
        if result.next_timeout_ms is not None and result.next_timeout_ms > now_ms:
            state.setTimeoutDuration(result.next_timeout_ms - now_ms)
        yield batch_output(result.events, rejected, now_ms)

    return reassemble
