"""profile_typed.py's lake handling on a small delta-rs lake: a typed table rolled back to
before a batch, a raw table's files of that batch, and the job's app id from a txn."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from benchmarks.profile_typed import app_id, batch_inputs, roll_back
from pipeline.spark.typed.direct import RAW_INPUTS


def _table(path: Path, app: str) -> None:
    """Version 0 empty, then batch b in version b + 1, each with its txn."""
    write_deltalake(str(path), pa.table({"n": pa.array([], pa.int64())}))
    for batch in (0, 1, 2):
        write_deltalake(str(path), pa.table({"n": [batch]}), mode="append",
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(f"{app}-{path.name}", batch)]))


def test_a_typed_table_is_rolled_back_and_a_raw_batch_found(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    for name in (*RAW_INPUTS, "current_color_4"):
        _table(lake / name, "urbpipe-1")
    tables = roll_back(lake, 1)
    assert [t.name for t in tables] == ["current_color_4"], "raw tables are not touched"
    current = DeltaTable(str(lake / "current_color_4"))
    assert current.version() == 1, "batch 1 (version 2) and later are gone"
    assert current.to_pyarrow_table().column("n").to_pylist() == [0]
    assert DeltaTable(str(lake / "records")).version() == 3
    inputs = batch_inputs(lake, 1)
    for name in RAW_INPUTS:
        (path, subs), = inputs[name]
        assert subs == () and Path(path).exists()
        before = set(DeltaTable(str(lake / name), version=1).file_uris())
        after = set(DeltaTable(str(lake / name), version=2).file_uris())
        assert {Path(f).name for f in after - before} == {Path(path).name}
    assert app_id(lake / "current_color_4") == "urbpipe-1"
