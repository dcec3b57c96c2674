"""Format buffer parsing, layout validation, serialisation and the Spark DDL."""

from __future__ import annotations

import pytest

from pipeline.payload import (
    FieldSpec,
    Filler,
    GroupSpec,
    LayoutError,
    LayoutKey,
    RecordLayout,
    layout_from_conf,
    parse_format_buffer,
    spark_ddl,
)


def test_issue_example_with_columns() -> None:
    lay = parse_format_buffer("AA,8,A,AB,20,A,AC,4,P,AD,4,B.", {"AA": "name", "AB": "city"})
    assert lay.items == (
        FieldSpec("AA", "name", "A", 8),
        FieldSpec("AB", "city", "A", 20),
        FieldSpec("AC", "ac", "P", 4),
        FieldSpec("AD", "ad", "B", 4),
    )
    assert lay.fixed_size == 36
    assert lay.columns == ("name", "city", "ac", "ad")


def test_scale_in_buffer_beats_conf_scales() -> None:
    lay = parse_format_buffer("AC,4,P,2,AD,5,U", scales={"AC": 4, "AD": 1})
    assert [(f.name, f.scale) for f in lay.items] == [("AC", 2), ("AD", 1)]


def test_lengths_and_formats_from_fdt_and_joined_gfb_pieces() -> None:
    # the seed's EMPLTEL GFB, split as the replicator parameters split it
    fb = "AA,AC,AD,AE," + "AH,8,U,AN,AM,AO,AP."
    fdt = {"AA": "8,A", "AC": "20,A", "AD": "20,A", "AE": (20, "A"), "AH": "6,U", "AN": "6,A"}
    fdt |= {"AM": "15,A", "AO": "6,A", "AP": "25,A"}
    lay = parse_format_buffer(fb, fdt=fdt)
    assert lay.fixed_size == 128
    assert lay.items[4] == FieldSpec("AH", "ah", "U", 8)  # the buffer's length wins over the FDT


def test_format_without_length_and_lower_case() -> None:
    lay = parse_format_buffer(" aa,p , ab ", fdt={"AA": "4,U", "AB": "3,A"})
    assert lay.items == (FieldSpec("AA", "aa", "P", 4), FieldSpec("AB", "ab", "A", 3))


def test_mu_ranges_counts_single_occurrences_and_fillers() -> None:
    lay = parse_format_buffer(
        "AA,8,A,ABC,1,B,AB1-N,10,A,AC1-3,4,P,AD2,2,A,3X", {"AB": "phones", "AC": "amounts"}
    )
    assert lay.items == (
        FieldSpec("AA", "aa", "A", 8),
        FieldSpec("ABC", "phones_count", "B", 1),
        FieldSpec("AB", "phones", "A", 10, count_field="ABC"),
        FieldSpec("AC", "amounts", "P", 4, occurrences=3),
        FieldSpec("AD", "ad_2", "A", 2),
        Filler(3),
    )
    assert lay.fixed_size is None


def test_count_field_defaults_to_one_byte_binary() -> None:
    lay = parse_format_buffer("ABC,AB1-N,3,A")
    assert lay.items[0] == FieldSpec("ABC", "ab_count", "B", 1)


def test_pe_group() -> None:
    lay = parse_format_buffer(
        "GAC,2,B,GA1-N,GB2-4",
        groups={"GA": "AR,3,A,AS,4,P,2", "GB": "AT,2,F"},
        columns={"GA": "income", "AR": "currency"},
    )
    ga, gb = lay.items[1], lay.items[2]
    assert isinstance(ga, GroupSpec) and isinstance(gb, GroupSpec)
    assert ga == GroupSpec(
        "GA",
        "income",
        (FieldSpec("AR", "currency", "A", 3), FieldSpec("AS", "as", "P", 4, 2)),
        count_field="GAC",
    )
    assert gb.occurrences == 3 and gb.length == 2


@pytest.mark.parametrize(
    ("fb", "kwargs", "match"),
    [
        ("", {}, "empty"),
        ("AA-AF", {}, "AA, AF not in the fdt"),
        ("AA-AC", {"fdt": {"AC": "1,A", "AA": "2,A"}}, "AC comes before AA in the fdt"),
        ("AA-AC,4,A", {"fdt": {"AA": "2,A", "AC": "1,A"}}, "come from the fdt"),
        ("AA-AC", {"fdt": {"AA": "2,A", "GA": "1,A", "AC": "1,A"}, "groups": {"GA": "AR,1,A"}},
         "PE group GA inside a range"),
        ("AA-AB", {"fdt": {"AA": "2,A", "AB": "A"}}, "AB: no length/format"),
        ("GA1-2", {"groups": {"GA": "AR-AS"}, "fdt": {"AR": "1,A", "AS": "1,A"}}, "plain fields"),
        ("'TEXT'", {}, "not a supported field"),
        ("AA", {}, "no length/format"),
        ("AA,8,Q", {}, "not a supported field"),
        ("AA,0,F", {}, "format F cannot have length 0"),
        ("AA,0,G", {}, "format G cannot have length 0"),
        ("ABC,0,B,AB1-N,3,A", {}, "count field cannot have length 0"),
        ("GA1-N,0", {"groups": {"GA": "AR,3,A"}}, "GA1-n"),
        ("AA,8,A,AA,8,A", {}, "used twice"),
        ("AB1-N,3,A", {}, "count field ABC must come before"),
        ("AB2-N,3,A", {}, "must start at 1"),
        ("AB3-1,3,A", {}, "empty range"),
        ("AA,4,B,2", {}, "scale needs format P or U"),
        ("AA,2,P,4", {}, "scale 4 outside"),
        ("AA,3,F", {}, "length 3 not valid"),
        ("AA,5,G", {}, "length 5 not valid"),
        ("GA", {"groups": {"GA": "AR,3,A"}}, "GA1-n"),
        ("GA1-2", {"groups": {"GA": "AR1-2,3,A"}}, "plain fields"),
    ],
)
def test_bad_format_buffers(fb: str, kwargs: dict, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        parse_format_buffer(fb, **kwargs)


def test_field_ranges_follow_the_fdt_order() -> None:
    fdt = {"AA": "8,A", "AB": "2,B", "AC": "4,P,2", "AD": "0,A,LA", "AE": "1,A", "AF": "3,U"}
    lay = parse_format_buffer("AE,AB-AD,AA-AA,4X.", {"AC": "salary"}, fdt=fdt)
    assert lay.items == (
        FieldSpec("AE", "ae", "A", 1),
        FieldSpec("AB", "ab", "B", 2),
        FieldSpec("AC", "salary", "P", 4, 2),
        FieldSpec("AD", "ad", "A", 0, prefix=2),
        FieldSpec("AA", "aa", "A", 8),
        Filler(4),
    )


def test_variable_length_fields_and_la_lb_prefixes() -> None:
    lay = parse_format_buffer(
        "AA,0,A,AB,0,P,2,AZ,AY,0,W,AX,8,A", fdt={"AZ": "0,A,LA", "AY": "LB,200,W", "AX": "LA"}
    )
    assert lay.items == (
        FieldSpec("AA", "aa", "A", 0),
        FieldSpec("AB", "ab", "P", 0, 2),
        FieldSpec("AZ", "az", "A", 0, prefix=2),
        FieldSpec("AY", "ay", "W", 0, prefix=4),  # the buffer's length 0 wins, LB from the FDT
        FieldSpec("AX", "ax", "A", 8),  # read with a fixed length: no prefix
    )
    assert lay.fixed_size is None and lay.items[0].min_size == 1 and lay.items[2].min_size == 2
    assert RecordLayout.from_dict(lay.to_dict()) == lay
    old_form = lay.to_dict()  # layouts stored before prefixes existed read back with 1
    del old_form["items"][0]["prefix"]
    assert RecordLayout.from_dict(old_form) == lay
    with pytest.raises(LayoutError, match="length prefix needs length 0"):
        FieldSpec("AA", "aa", "A", 8, prefix=2)
    with pytest.raises(LayoutError, match="length prefix 3 is not 1, 2 or 4"):
        FieldSpec("AA", "aa", "A", 0, prefix=3)
    assert spark_ddl(parse_format_buffer("AA,0,A,AB,0,B,AC,0,P,2,AD,0,U,AE,0,W")) == (
        "`aa` string, `ab` binary, `ac` decimal(29,2), `ad` decimal(29,0), `ae` string"
    )


def test_layout_from_conf_and_round_trip_through_dict() -> None:
    conf = {
        "format_buffer": "AA,8,A,ABC,1,B,AB1-N,3,A,GA1-2,2X.",
        "columns": {"AA": "name"},
        "groups": {"GA": "AR,3,A,AS,4,P"},
        "scales": {"AS": 2},
        "dbid": 10006,
        "fnr": 9,
    }
    lay = layout_from_conf(conf)
    assert lay.key == LayoutKey(10006, 9)
    again = RecordLayout.from_dict(lay.to_dict())
    assert again == lay
    with pytest.raises(LayoutError):
        layout_from_conf({"columns": {}})


def test_spark_ddl() -> None:
    lay = parse_format_buffer(
        "AA,8,A,AW,10,W,B1,1,B,B2,2,B,B4,4,B,B8,8,B,BX,16,B,F2,2,F,F8,8,F,AC,4,P,2,AU,5,U,"
        "AG,8,G,ABC,1,B,AB1-N,3,P,GA1-2",
        groups={"GA": "AR,3,A,AS,4,P,1"},
    )
    assert spark_ddl(lay) == (
        "`aa` string, `aw` string, `b1` int, `b2` int, `b4` bigint, `b8` decimal(20,0), "
        "`bx` binary, `f2` int, `f8` bigint, `ac` decimal(7,2), `au` decimal(5,0), "
        "`ag` double, `ab_count` int, `ab` array<decimal(5,0)>, "
        "`ga` array<struct<`ar`:string,`as`:decimal(7,1)>>"
    )


def test_spark_ddl_quotes_columns() -> None:
    lay = parse_format_buffer("AA,8,A", {"AA": "odd`name"})
    assert spark_ddl(lay) == "`odd``name` string"
