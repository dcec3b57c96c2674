"""Engine-free logic of the typed tables (changes_<sub>_<fnr>, current_<sub>_<fnr>).

``versioning`` decides what a record does to an ISN's current row and which of several changes
wins; ``decoding`` turns a frame of image rows into typed columns with ``PayloadDecoder``.
Both are plain Python so they are unit-tested without Spark; ``pipeline.spark.typed`` runs
them (mapInPandas) and expresses the same rules as a Delta MERGE.
"""

from .decoding import DecodeSpec, decode_rows
from .versioning import (
    DELETE,
    UNVERIFY,
    UPSERT,
    action_of,
    apply_batch,
    apply_change,
    latest_per_isn,
    newer,
    version_of,
)

__all__ = [
    "DELETE",
    "UNVERIFY",
    "UPSERT",
    "DecodeSpec",
    "action_of",
    "apply_batch",
    "apply_change",
    "decode_rows",
    "latest_per_isn",
    "newer",
    "version_of",
]
