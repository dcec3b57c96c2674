"""decode_rows: the mapInPandas body, without Spark."""

from __future__ import annotations

from decimal import Decimal

import pandas as pd

from pipeline.payload import encode_payload, parse_format_buffer
from pipeline.typed import DecodeSpec, decode_rows

LAYOUT = parse_format_buffer("AA,8,A,AB,4,P,2,AC,6,B,AD,3,U.", {"AA": "name"})


def test_both_forms_negative_numbers_and_a_bad_image() -> None:
    values = {"name": "SMITH", "ab": Decimal("-12.34"), "ac": 2**40 + 5, "ad": Decimal(-7)}
    ebcdic = encode_payload(values, LAYOUT, ebcdic=True)
    ascii_ = encode_payload(values, LAYOUT, ebcdic=False)
    frames = [pd.DataFrame({"payload": [ebcdic, ebcdic[:-1]], "acode": [0, 0],
                            "wcode": [0, 0], "arc": [0, 0], "isn": [1, 2]})]
    out = next(decode_rows(iter(frames), DecodeSpec(LAYOUT, ebcdic=True)))
    assert out.loc[0, "name"] == "SMITH" and out.loc[0, "ab"] == Decimal("-12.34")
    assert out.loc[0, "ac"] == Decimal(2**40 + 5) and isinstance(out.loc[0, "ac"], Decimal)
    assert out.loc[0, "ad"] == -7 and out.loc[0, "_error"] is None
    assert out.loc[1, "name"] is None and "AD" in out.loc[1, "_error"]
    assert list(out["isn"]) == [1, 2]
    frames = [pd.DataFrame({"payload": [ascii_], "acode": [819], "wcode": [0], "arc": [9]})]
    out = next(decode_rows(iter(frames), DecodeSpec(LAYOUT, ebcdic=False)))
    assert out.loc[0, "name"] == "SMITH" and out.loc[0, "ad"] == -7


def test_empty_null() -> None:
    blank = encode_payload({"name": "", "ab": 0, "ac": 0, "ad": 0}, LAYOUT, ebcdic=True)
    frames = [pd.DataFrame({"payload": [blank], "acode": [0], "wcode": [0], "arc": [0]})]
    out = next(decode_rows(iter(frames), DecodeSpec(LAYOUT, ebcdic=True, empty="null")))
    assert out.loc[0, ["name", "ab", "ac", "ad"]].isna().all()
