"""Which layout decodes an image (GFFT version by commit time, conf fallback) and which
columns the typed tables carry (additive evolution, refused type changes)."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd

from pipeline.config import TYPED_KEY_COLUMNS
from pipeline.payload import LayoutKey, RecordLayout, encode_payload, parse_format_buffer
from pipeline.typed.decoding import ERROR_COLUMN, VersionedSpec, decode_rows, decode_table
from pipeline.typed.layouts import FileLayouts, plan_columns
from pipeline.urb.stck import stck_to_unix_us

T0 = 0xDD00000000000000  # a STCK in 2023
US = 1 << 12  # one microsecond in STCK units


def version(fb: str, created: int, gfid: str = "GFB") -> RecordLayout:
    lay = parse_format_buffer(fb, {"AA": "name", "AB": "amount", "AC": "city"})
    return RecordLayout(lay.items, LayoutKey(10006, 4, gfid, created), "gfft")


CONF = parse_format_buffer("AA,8,A.", {"AA": "name"})
V1 = version("AA,8,A,AB,4,P,2.", T0)
V2 = version("AA,8,A,AB,4,P,2,AC,10,A.", T0 + 1000 * US)


def test_pick_by_commit_time_with_conf_fallback() -> None:
    t0 = stck_to_unix_us(T0)
    files = FileLayouts(CONF, (V2, V1, V1))  # any order, repeats collapse
    assert files.versions == (V1, V2)
    assert files.pick(t0 - 1) is CONF  # before the first version: the format buffer
    assert files.pick(t0) is V1 and files.pick(t0 + 999) is V1
    assert files.pick(t0 + 1000) is V2 and files.pick(None) is CONF
    gfft_only = FileLayouts(None, (V1, V2))
    assert gfft_only.pick(t0 - 1) is V1  # no format buffer: the oldest version
    assert FileLayouts(None).pick(t0) is None


def test_new_fields_add_columns_and_a_type_change_is_refused() -> None:
    plan = plan_columns(FileLayouts(CONF, (V1, V2)), {"name": "string"}, TYPED_KEY_COLUMNS)
    assert plan.columns == {"name": "string", "amount": "decimal(7,2)", "city": "string"}
    assert plan.added == {"amount": "decimal(7,2)", "city": "string"}
    assert not plan.refused
    changed = version("AA,8,A,AB,8,A.", T0 + 2000 * US, "GFB2")  # amount becomes alpha
    plan = plan_columns(FileLayouts(CONF, (V1, changed)), {"name": "string"})
    assert plan.columns == {"name": "string", "amount": "decimal(7,2)"}
    assert list(plan.refused) == [changed.key]
    assert "column amount is decimal(7,2) in the tables, string in this layout" in \
        plan.refused[changed.key]
    # the tables' own type wins over the first layout's
    plan = plan_columns(FileLayouts(None, (V1,)), {"amount": "string"})
    assert list(plan.refused) == [V1.key]
    reserved = RecordLayout(parse_format_buffer("AA,8,A.", {"AA": "isn"}).items,
                            LayoutKey(1, 4, "X", T0), "gfft")
    assert "reserved" in plan_columns(FileLayouts(None, (reserved,)), {},
                                      TYPED_KEY_COLUMNS).refused[reserved.key]


def test_versioned_decode_picks_per_image_and_fills_the_union() -> None:
    t0 = stck_to_unix_us(T0)
    changed = version("AA,8,A,AB,8,A.", T0 + 2000 * US, "GFB2")
    files = FileLayouts(CONF, (V1, V2, changed))
    plan = plan_columns(files, None)
    spec = VersionedSpec(files, plan.columns, ebcdic=True, refused=plan.refused)
    images = [
        (encode_payload({"name": "OLD"}, CONF, ebcdic=True), t0 - 5),
        (encode_payload({"name": "ONE", "amount": Decimal("1.25")}, V1, ebcdic=True), t0),
        (encode_payload({"name": "TWO", "amount": Decimal("-2.50"), "city": "BONN"}, V2,
                        ebcdic=True), t0 + 1500),
        (b"\x40" * 16, t0 + 2500),  # laid out by the refused version
    ]
    frame = pd.DataFrame({"payload": [p for p, _ in images], "acode": 0, "wcode": 0, "arc": 0,
                          "_commit_us": [c for _, c in images]})
    out = next(decode_rows(iter([frame]), spec))
    assert list(out["name"][:3]) == ["OLD", "ONE", "TWO"]
    assert list(out["amount"][:3]) == [None, Decimal("1.25"), Decimal("-2.50")]
    assert list(out["city"][:3]) == [None, None, "BONN"]
    assert list(out[ERROR_COLUMN][:3]) == [None, None, None]
    assert "refused" in out[ERROR_COLUMN][3] and out["name"][3] is None
    nothing = VersionedSpec(FileLayouts(None), {}, ebcdic=True)
    out = next(decode_rows(iter([frame.head(1)]), nothing))
    assert "no layout for this file yet" in out[ERROR_COLUMN][0]


def test_conf_gfft_modes() -> None:
    import pytest
    from pydantic import ValidationError

    from pipeline.config import Layout

    stream_only = Layout(subscription="COLOR", dbid=1, fnr=4, columns={"AA": "name"})
    assert stream_only.gfft == "prefer" and stream_only.conf_layout() is None
    assert Layout(subscription="C", dbid=1, fnr=4, gfft="require").conf_layout() is None
    with pytest.raises(ValidationError, match="format_buffer is required with gfft: ignore"):
        Layout(subscription="C", dbid=1, fnr=4, gfft="ignore")
    with pytest.raises(ValidationError, match="from the stream only"):
        Layout(subscription="C", dbid=1, fnr=4, gfft="require", format_buffer="AA,8,A.")
    with pytest.raises(ValidationError, match="reserved"):
        Layout(subscription="C", dbid=1, fnr=4, columns={"AA": "isn"})


def test_column_wise_versioned_decode_is_decode_rows() -> None:
    """``decode_table`` (the direct writer's) picks the same version per image as
    ``decode_rows``, null commit times included, and gives the same values and errors."""
    import pyarrow as pa

    t0 = stck_to_unix_us(T0)
    changed = version("AA,8,A,AB,8,A.", T0 + 2000 * US, "GFB2")
    files = FileLayouts(CONF, (V1, V2, changed))
    plan = plan_columns(files, None)
    spec = VersionedSpec(files, plan.columns, ebcdic=True, refused=plan.refused)
    one = encode_payload({"name": "ONE", "amount": Decimal("1.25")}, V1, ebcdic=True)
    images = [(encode_payload({"name": "OLD"}, CONF, ebcdic=True), t0 - 5), (one, t0),
              (encode_payload({"name": "TWO", "amount": Decimal("-2.50"), "city": "BONN"}, V2,
                              ebcdic=True), t0 + 1500),
              (b"\x40" * 16, t0 + 2500), (one, None), (one, t0), (b"\x00", t0 + 10)]
    frame = pd.DataFrame({"payload": [p for p, _ in images], "acode": 0, "wcode": 0, "arc": 0,
                          "_commit_us": [c for _, c in images]})
    want = next(decode_rows(iter([frame]), spec))
    table = pa.table({"payload": pa.array([p for p, _ in images], pa.binary()),
                      "acode": [0] * 7, "wcode": [0] * 7, "arc": [0] * 7,
                      "commit_time": pa.array([c for _, c in images],
                                              pa.int64()).cast(pa.timestamp("us", tz="UTC"))})
    types = {"name": pa.string(), "amount": pa.decimal128(7, 2), "city": pa.string()}
    got, errors = decode_table(table, spec, types)
    assert errors == list(want[ERROR_COLUMN])
    for column, kind in types.items():
        assert got[column].to_pylist() == pa.array(list(want[column]), kind).to_pylist()
