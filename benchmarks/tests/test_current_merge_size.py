"""The current-table MERGE benchmark (benchmarks/current_merge_size.py) on a small table:
its figures, and the copy-on-write it measures (a MERGE that updates one ISN of a file copies
the file's other rows: delta-rs writes no deletion vectors)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.current_merge_size import measure


def test_a_few_updates_copy_the_whole_table(tmp_path: Path) -> None:
    args = argparse.Namespace(batch_inserts=500, updates=5, merges=2, seed=3)
    result = measure(2_000, args, tmp_path / "scratch")
    assert result["files"] == 4
    assert len(result["merges_s"]) == 2
    assert (result["rows_updated"], result["rows_inserted"]) == (5, 500)
    # the first MERGE rewrote the four files into one: the last copies that one's other rows
    # (and the first MERGE's inserts too, should an update fall among them)
    assert result["rows_copied"] in (2_000 - 5, 2_000 + 500 - 5)


def test_inserts_alone_copy_nothing(tmp_path: Path) -> None:
    args = argparse.Namespace(batch_inserts=500, updates=0, merges=1, seed=3)
    result = measure(2_000, args, tmp_path / "scratch")
    assert (result["rows_copied"], result["rows_updated"], result["rows_inserted"]) == (0, 0, 500)
