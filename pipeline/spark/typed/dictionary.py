"""What every column of the typed tables means: the comments their Delta schemas carry.

The key and version columns (``CHANGE_KEYS_DDL``, ``CURRENT_META_DDL``, ``TOMBSTONE_DDL``,
``INTERVAL_DDL``) mean the same in every file's tables; a value column names the Adabas field
it holds: short name, the GFFT's long name when the layout came from the stream, format, length,
scale, occurrences, and the layout that described it (the conf's format buffer, or a GFFT
version). ``pipeline.spark.typed.comments`` puts them on the tables; ``DATA_DICTIONARY.md`` is
generated from the same text (``pipeline.ops.dictionary``).
"""

from __future__ import annotations

from pipeline.payload import FieldSpec, Filler, GroupSpec, RecordLayout
from pipeline.spark.land.dictionary import Doc
from pipeline.typed.layouts import version_label

_D = Doc
_VERSION = ("(commit_time, epoch, tsnr, rsnr) is the change's version: the newest wins, "
            "whatever the arrival order.")

#: Table kind (the name's prefix) → what one row is.
TABLE_DOCS: dict[str, str] = {
    "changes": "One row per after or before image of a record of the file, decoded.",
    "current": "One row per ISN: its newest change's values (version-guarded MERGE).",
    "tombstones": "One row per removed ISN (deletes: remove): the delete's version, so a "
                  "later-arriving older change never revives the row.",
    "history": "One row per version of an ISN (SCD type 2), valid over [valid_from, valid_to).",
}

_KEYS: dict[str, Doc] = {
    "subscription": _D("Subscription (URBTSNAM) of the change's transaction."),
    "destination": _D("Replicator destination the change's transaction came on."),
    "epoch": _D("Replicator run of the change's transaction (see transactions.epoch)."),
    "tsnr": _D("Transaction sequence number (URBTTSNR) of the change; 0 for initial state."),
    "rsnr": _D("Record sequence number (URBRRSNR) of the change in its transaction."),
    "dsnr": _D("Data sequence number (URBDDSNR) of the image in its record."),
    "isn": _D("Adabas ISN of the record (URBRISN)."),
    "record_type": _D("Record type of the change (URBRTYP): 'I' insert, 'U' update, 'D' "
                      "delete, 'R' initial-state record."),
    "image_type": _D("URBDTYP: 'A' after image, 'B' before image (K images stay in images)."),
    "commit_time": _D("Commit time of the change's transaction (URBTTTIM; for an "
                      "initial-state record its read time URBRTIME), UTC. " + _VERSION),
    "origin": _D("'live', 'resend' (TRAN answer, before images only), 'initial_state' or "
                  "'reconcile' (an answer to urbpipe reconcile's INST)."),
    "batch_id": _D("Streaming micro-batch that wrote the row."),
    "deleted": _D("The ISN's newest change is a delete (deletes: mark keeps the row; with "
                  "remove, current_ never shows one)."),
    "verified": _D("The values are the record's own: false after a resend (before images "
                   "only) or an image that could not be decoded, until an after image or "
                   "initial-state record arrives."),
    "valid_from": _D("Start of the version's interval: its commit time (UTC)."),
    "valid_to": _D("End of the interval, exclusive: the next version's commit time, or a "
                   "refresh's cutoff.", "while the version is current"),
    "is_current": _D("The ISN's newest version."),
}


def fixed_doc(kind: str, column: str) -> Doc | None:
    """The key/version column ``column`` of a ``kind`` table (changes, current, tombstones,
    history), or None for a value column."""
    doc = _KEYS.get(column)
    if doc is None:
        return None
    if kind == "tombstones" and column == "commit_time":
        return _D("Commit time of the delete (URBTTTIM), UTC: changes older than it never "
                  "revive the ISN.")
    return doc


def _field_text(spec: FieldSpec) -> str:
    name = f"{spec.name} ({spec.long_name})" if spec.long_name else spec.name
    length = "variable length" if spec.variable else f"length {spec.length}"
    parts = [f"format {spec.format}", length]
    if spec.format in "PU":
        parts.append(f"scale {spec.scale}")
    if spec.prefix != 1:
        parts.append(f"{'LA' if spec.prefix == 2 else 'LB'} field")
    if spec.occurrences is not None:
        parts.append(f"{spec.occurrences} occurrences (MU)")
    elif spec.count_field is not None:
        parts.append(f"occurrences counted by {spec.count_field}")
    if spec.counts is not None:
        parts.append(f"count of {spec.counts}'s occurrences")
    return f"{name}: {', '.join(parts)}"


def source_label(layout: RecordLayout) -> str:
    """Which layout described a column: the conf's format buffer or a GFFT version."""
    if layout.source == "gfft":
        return f"GFFT {version_label(layout.key)}"
    return "conf format buffer"


def value_doc(item: FieldSpec | GroupSpec, layout: RecordLayout) -> Doc:
    """The comment of the value column one layout item makes."""
    if isinstance(item, GroupSpec):
        occ = (f"{item.occurrences} occurrences" if item.occurrences is not None
               else f"occurrences counted by {item.count_field}")
        members = "; ".join(_field_text(m) for m in item.members)
        text = f"Adabas PE group {item.name}, {occ}, one struct per occurrence: {members}."
    else:
        text = f"Adabas field {_field_text(item)}."
    return _D(f"{text} Layout: {source_label(layout)}.",
              "when the change's layout version lacks the field, for a change without its "
              "image, or for an empty value with empty: null")


def value_comments(layouts: list[RecordLayout]) -> dict[str, str]:
    """Column → comment of every value column the layouts name, each from the newest layout
    that names it (``layouts`` oldest first: the conf's, then GFFT versions by creation)."""
    out: dict[str, str] = {}
    for layout in layouts:
        for item in layout.items:
            if not isinstance(item, Filler):
                out[item.column] = value_doc(item, layout).comment()
    return out


def typed_comments(kind: str, columns: list[str], values: dict[str, str]) -> dict[str, str]:
    """Column → comment of a ``kind`` table's columns: key/version columns from their docs,
    value columns from ``values`` (columns neither knows are left out)."""
    out: dict[str, str] = {}
    for column in columns:
        doc = fixed_doc(kind, column)
        if doc is not None:
            out[column] = doc.comment()
        elif column in values:
            out[column] = values[column]
    return out

