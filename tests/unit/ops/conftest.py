"""Engine-free fixtures for the operator CLI: a conf pointing at a lake in tmp_path, and a way
to write the job's Delta tables with the ``deltalake`` package (the schemas of
pipeline/spark/land/tables.py), so every command runs against real Delta tables without Spark."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipeline.config import Settings, load_settings
from pipeline.spark.land.tables import arrow_schema, table_path

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CONF = """
kafka:
  bootstrap_servers: 127.0.0.1:1
topics:
  outputs: {{urb.out1: OUT1}}
  replies: urb.replies
  requests: urb.requests
subscriptions:
  - name: COLOR
    destinations: [OUT1]
  - name: EMPLOYEE
    destinations: [OUT1]
stream:
  lake_dir: {lake}
  checkpoint_dir: {checkpoint}
"""

WriteTable = Callable[[str, list[dict[str, Any]]], None]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def conf_file(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "ops.yaml"
    path.parent.mkdir()
    path.write_text(CONF.format(lake=tmp_path / "lake", checkpoint=tmp_path / "checkpoint"))
    return path


@pytest.fixture
def ops_settings(conf_file: Path) -> Settings:
    return load_settings(conf_file, env={})


@pytest.fixture
def write_table(ops_settings: Settings) -> WriteTable:
    """Append rows (missing columns are null) to one of the job's tables."""

    def write(table: str, rows: list[dict[str, Any]]) -> None:
        schema = arrow_schema(table)
        full = [{name: row.get(name) for name in schema.names} for row in rows]
        write_deltalake(table_path(ops_settings, table), pa.Table.from_pylist(full, schema=schema),
                        mode="append")

    return write


def transaction(sub: str, tsnr: int, *, epoch: int = 1, landed: float = 10.0,
                dest: str = "OUT1", **extra: Any) -> dict[str, Any]:
    return {"subscription": sub, "destination": dest, "epoch": epoch, "tsnr": tsnr,
            "commit_time": at(landed - 3), "processed_time": at(landed - 2),
            "sent_time": at(landed - 1), "landed_at": at(landed), "initial_state": tsnr == 0,
            "resent": False, "batch_id": 1, **extra}


def gap_row(sub: str, from_tsnr: int, state: str, updated: float, *, epoch: int = 1,
            batch: int = 1, dest: str = "OUT1") -> dict[str, Any]:
    return {"subscription": sub, "destination": dest, "epoch": epoch,
            "gap_id": f"{epoch}:{from_tsnr}", "from_tsnr": from_tsnr, "to_tsnr": from_tsnr,
            "state": state, "requests_sent": 1 if state != "open" else 0, "missing_count": 1,
            "opened_at": at(0), "updated_at": at(updated),
            "closed_at": at(updated) if state in ("filled", "unrecoverable") else None,
            "reason": "transaction(s) never received", "batch_id": batch}
