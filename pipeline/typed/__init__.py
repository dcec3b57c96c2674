"""Engine-free logic of the typed tables (changes_, current_, tombstones_ and history_<sub>_<fnr>).

``versioning`` decides what a record does to an ISN's current row, which of several changes
wins and which deletes stay as tombstones; ``history`` recomputes the SCD type 2 intervals of
the ISNs a batch touches; ``decoding`` turns a frame of image rows into typed columns with
``PayloadDecoder``. All plain Python so they are unit-tested without Spark;
``pipeline.spark.typed`` runs them (mapInPandas) and expresses the same rules as Delta MERGEs.
"""

from .decoding import DecodeSpec, decode_rows
from .history import apply_history_batch, history_of, truncate_history
from .versioning import (
    DELETE,
    UNVERIFY,
    UPSERT,
    action_of,
    apply_batch,
    apply_change,
    latest_per_isn,
    newer,
    order_key,
    since_cutoff,
    tombstones,
    truncate,
    version_of,
    visible,
)

__all__ = [
    "DELETE",
    "UNVERIFY",
    "UPSERT",
    "DecodeSpec",
    "action_of",
    "apply_batch",
    "apply_change",
    "apply_history_batch",
    "decode_rows",
    "history_of",
    "latest_per_isn",
    "newer",
    "order_key",
    "since_cutoff",
    "tombstones",
    "truncate",
    "truncate_history",
    "version_of",
    "visible",
]
