"""What the streaming job has processed, read from its Spark checkpoint (no Spark needed).

Spark never commits Kafka offsets to the broker, so consumer-group lag tools see nothing; the
truth is the query's checkpoint. The format relied on (Spark 3.x/4.x, ``OffsetSeqLog`` v1):

- ``<checkpoint>/offsets/<batchId>``: line 1 ``v1``; line 2 the batch metadata JSON
  (``batchWatermarkMs``, ``batchTimestampMs``, ``conf``); then one line per source of the
  query, either ``-`` (no offset) or that source's offset JSON. For Spark's Kafka source it is
  ``{"<topic>": {"<partition>": <offset>, ...}, ...}``: the *next* offset to read, i.e. the
  exclusive end of batch ``batchId``.
- ``<checkpoint>/commits/<batchId>`` exists once batch ``batchId`` has completed (its sink
  wrote everything).

Processed offsets are those of the newest batch that has both files; a batch with an offsets
file but no commit is in flight and not counted. A checkpoint on a local (or mounted) file
system is read directly, one on ``s3a://`` through the conf's ``object_store`` (pyarrow's S3
file system: two listings of at most Spark's retained batches, one small file); any other
scheme is reported as unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.objectstore import S3Access, is_object_store, pyarrow_path

OFFSET_LOG_VERSION = "v1"


@dataclass(frozen=True)
class CheckpointOffsets:
    """Processed Kafka offsets of the newest completed batch."""

    batch_id: int
    batch_timestamp_ms: int | None
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # topic → partition → next


def _batch_ids(folder: Path) -> set[int]:
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def parse_offsets_file(text: str) -> tuple[int | None, dict[str, dict[int, int]]]:
    """(batchTimestampMs, topic → partition → offset) from one offsets/<batchId> file."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() != OFFSET_LOG_VERSION:
        raise ValueError(f"not a {OFFSET_LOG_VERSION} Spark offsets file")
    meta = json.loads(lines[1]) if len(lines) > 1 else {}
    offsets: dict[str, dict[int, int]] = {}
    for line in lines[2:]:
        if line.strip() == "-":
            continue
        source = json.loads(line)
        if not isinstance(source, dict):
            continue
        for topic, parts in source.items():
            if isinstance(parts, dict):
                offsets.setdefault(topic, {}).update({int(p): int(o) for p, o in parts.items()})
    return meta.get("batchTimestampMs"), offsets


def _store_batch_ids(fs: Any, folder: str) -> set[int]:
    from pyarrow.fs import FileSelector

    found = fs.get_file_info(FileSelector(folder, allow_not_found=True))
    return {int(i.base_name) for i in found if i.base_name.isdigit()}


def processed_offsets(checkpoint: str, store: S3Access | None = None
                      ) -> CheckpointOffsets | None:
    """The newest completed batch's offsets, or None (no checkpoint, another scheme, nothing
    done). ``store``: the object store of an ``s3a://`` checkpoint."""
    if is_object_store(checkpoint) and store is not None:
        fs, root = store.filesystem(), pyarrow_path(checkpoint)
        done = _store_batch_ids(fs, f"{root}/offsets") & _store_batch_ids(fs, f"{root}/commits")
        if not done:
            return None

        def read(batch: int) -> str:
            with fs.open_input_stream(f"{root}/offsets/{batch}") as stream:
                return stream.read().decode()
    elif "://" in checkpoint and not checkpoint.startswith("file:"):
        return None
    else:
        local = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
        done = _batch_ids(local / "offsets") & _batch_ids(local / "commits")
        if not done:
            return None

        def read(batch: int) -> str:
            return (local / "offsets" / str(batch)).read_text()
    batch = max(done)
    try:
        stamp, offsets = parse_offsets_file(read(batch))
    except (OSError, ValueError):
        return None
    return CheckpointOffsets(batch, stamp, offsets)
