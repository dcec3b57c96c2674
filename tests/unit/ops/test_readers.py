"""The README's readers outside Spark run as written: pandas, DuckDB and polars over deltalake's
Arrow dataset, on a current-state table written here with ``deltalake`` (no Spark), give the
rows the table holds."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

ROOT = Path(__file__).resolve().parents[3]


def _block() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- readers: [^>]*-->\n```python\n(.*?)```", text, flags=re.S)
    assert match, "README lost its readers block"
    return match[1]


def test_the_readme_readers_run_and_agree(tmp_path: Path, monkeypatch) -> None:
    rows = pa.table({
        "isn": pa.array([1, 2, 3, 4], pa.int64()),
        "color": ["RED", "RED", "BLUE", "GREEN"],
        "code": pa.array([Decimal(1), Decimal(-2), Decimal(3), Decimal(4)], pa.decimal128(16, 0)),
        "deleted": [False, False, False, True],
        "verified": [True, True, False, True]})
    write_deltalake(str(tmp_path / ".lake" / "current_color_4"), rows)
    monkeypatch.chdir(tmp_path)  # the block names the lake relative to the project folder
    scope: dict = {}
    exec(compile(_block(), "README.md readers", "exec"), scope)
    assert scope["frame"].sort_values("isn")["color"].tolist() == ["RED", "RED", "BLUE", "GREEN"]
    assert scope["by_color"] == [("RED", 2)], "unverified and deleted rows left out"
    assert scope["live"]["isn"].to_list() == [1, 2]
    assert scope["live"]["code"].to_list() == [Decimal(1), Decimal(-2)]
