"""The typed-table keys of a layout entry: history switch, tombstone retention, column names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.config import Layout

FB = {"subscription": "COLOR", "dbid": 10006, "fnr": 4, "format_buffer": "AA,16,A,AB,16,U."}


def test_defaults_keep_tombstones_for_30_days_and_no_history() -> None:
    lay = Layout(**FB)
    assert (lay.deletes, lay.tombstone_retention_days, lay.history) == ("remove", 30.0, False)
    assert Layout(**FB, tombstone_retention_days=None).tombstone_retention_days is None


def test_retention_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        Layout(**FB, tombstone_retention_days=0)


@pytest.mark.parametrize("name", ["is_current", "valid_to", "action", "_image", "Color"])
def test_columns_the_typed_tables_use_themselves_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="reserved or not a lower-case identifier"):
        Layout(**FB, columns={"AA": name})
