"""The direct typed writer's pick of each record's own after and before image
(``pipeline.spark.typed.file_writer._images_of``), by record row and not by a join, held to a
plain model: per record and kind, the image of greatest dsnr (null the least), the later row
of equal ones; none where the record has none."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.spark.typed.file_writer import _images_of
from pipeline.typed.batch_rows import RECORD_ROW

images_st = st.lists(st.tuples(st.integers(0, 4), st.sampled_from("AB"),
                               st.one_of(st.none(), st.integers(1, 3))), max_size=20)


def _model(records: int, images: list[tuple[int, str, int | None]]) -> dict[str, list]:
    out: dict[str, list] = {"A": [None] * records, "B": [None] * records}
    best: dict[tuple[int, str], tuple[float, int]] = {}
    for i, (row, kind, dsnr) in enumerate(images):
        rank = (float("-inf") if dsnr is None else dsnr, i)
        if (row, kind) not in best or rank > best[row, kind]:
            best[row, kind] = rank
            out[kind][row] = i
    return out


@settings(max_examples=300, deadline=None)
@given(images_st)
def test_each_record_gets_its_newest_image_of_each_kind(images) -> None:
    records = 5
    table = pa.table({RECORD_ROW: pa.array([r for r, _, _ in images], pa.int64()),
                      "image_type": pa.array([k for _, k, _ in images], pa.string()),
                      "dsnr": pa.array([d for _, _, d in images], pa.int64())})
    got = _images_of(records, table)
    assert {k: v.to_pylist() for k, v in got.items()} == _model(records, images)
