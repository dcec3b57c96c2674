"""Every column type through the real typed path (Spark + Delta, no Kafka), from known bytes.

One layout with A, W, B (2, 4, 8 bytes), F, P, U, G (4 and 8 bytes), an MU field, a PE
group and variable-length A, B, P and LA values (length 0: a length prefix per value); its
images written out by hand (not by the project's encoder) in the mainframe form
(EBCDIC text, UTF-16BE wide text, high-order first, IBM floats: URBTARC 2) and the Intel form
(Latin-1, UTF-16LE, low-order first, IEEE floats: URBTARC 9), plus one of blanks and zeros.
Landed by ``write_typed_tables`` twice over — a file with ``empty: keep`` and one with
``empty: null`` — and read back with Spark SQL and with the ``deltalake`` package: the exact
values, and the same rows from both readers. K images (the key before the image) never reach
the typed tables.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Layout, Settings
from pipeline.spark.engine.state_stage import OUTPUT_DDL, to_output
from pipeline.spark.land.tables import ensure_tables, table_path
from tests.spark.typed.test_typed_merge import land_typed

T0 = datetime(2025, 3, 1, 8, 0, 0, tzinfo=UTC)
APP = "types-test"
FORMAT_BUFFER = ("AA,8,A,AW,8,W,AB,2,B,AC,4,B,AD,8,B,AF,4,F,AP,4,P,2,AQ,3,P,AU,4,U,1,"
                 "AG,4,G,AH,8,G,AMC,1,B,AM1-N,2,P,GAC,1,B,GA1-N,AV,0,A,AX,0,B,AY,0,P,2,AZ.")
COLUMNS = {"AA": "name", "AW": "wide", "AB": "b2", "AC": "b4", "AD": "b8", "AF": "f4",
           "AP": "amount", "AQ": "qty", "AU": "zoned", "AG": "g4", "AH": "g8", "AM": "mu",
           "GA": "pe", "AV": "note", "AX": "blob", "AY": "vamount", "AZ": "long_text"}
FDT = {"AZ": "0,A,LA"}  # a long alpha field read with length 0: a 2-byte length prefix
GROUPS = {"GA": "GR,3,A,GS,3,P,2,GT,8,B"}
VALUES = ["name", "wide", "b2", "b4", "b8", "f4", "amount", "qty", "zoned", "g4", "g8",
          "mu_count", "mu", "pe_count", "pe", "note", "blob", "vamount", "long_text"]
KEEP, NULL = 7, 8  # the two files: empty: keep / empty: null, same images

#: (ACODE, WCODE, ARC) of the two forms.
MAINFRAME = (37, 1200, 2)
INTEL = (819, 1202, 9)

MAINFRAME_IMAGE = bytes.fromhex("".join((
    "d4fcd3d3c5d94040",  # AA 'MÜLLER' + 2 blanks, cp037 (Ü = X'FC')
    "65e5672c00200020",  # AW '日本' + 2 blanks, UTF-16BE (WCODE 1200)
    "0102",  # AB 258, high-order byte first
    "b2d05e00",  # AC 3,000,000,000: above 2**31, B is unsigned
    "8000000000000005",  # AD 2**63 + 5: above a signed long, decimal(20,0)
    "fffffffe",  # AF -2, two's complement
    "1234567d",  # AP packed -12345.67: digits 1234567, sign D, scale 2
    "12345f",  # AQ packed +12345, sign F
    "f1f2f3d4",  # AU zoned -123.4: F1 F2 F3, then zone D (negative) digit 4; scale 1
    "4019999a",  # AG IBM short 0.1: exponent X'40' (16**0), fraction X'19999A' (rounded up)
    "c276a00000000000",  # AH IBM long -118.625: sign 1, exponent X'42' (16**2), X'76A'/16**3
    "02",  # AMC: 2 occurrences of AM
    "005c" "007d",  # AM(1) packed +5, AM(2) packed -7
    "02",  # GAC: 2 occurrences of GA, each GR, GS, GT
    "c5e4d9" "01250c" "0000010000000001",  # GA(1): 'EUR', +12.50, 2**40 + 1
    "e4e2c4" "00100d" "0000000000000002",  # GA(2): 'USD', -1.00, 2
    "03c8c9",  # AV 'HI': length 3 counts its own byte
    "05deadbeef",  # AX 4 bytes, kept as bytes
    "03150d",  # AY packed -1.50 in 2 bytes
    "0006d3d6d5c7",  # AZ (LA) 'LONG': a 2-byte length 6, high-order first
)))
INTEL_IMAGE = bytes.fromhex("".join((
    "4ddc4c4c45522020",  # AA 'MÜLLER' + 2 blanks, Latin-1 (Ü = X'DC')
    "e5652c6720002000",  # AW '日本' + 2 blanks, UTF-16LE (WCODE 1202)
    "0201",  # AB 258, low-order byte first
    "005ed0b2",  # AC 3,000,000,000
    "0500000000000080",  # AD 2**63 + 5
    "feffffff",  # AF -2
    "1234567d",  # AP -12345.67: packed bytes are the same in both forms
    "12345f",  # AQ +12345
    "31323374",  # AU -123.4: '1' '2' '3', then zone 7 (negative) digit 4
    "cdcccc3d",  # AG IEEE single 0.1 (X'3DCCCCCD'), low-order byte first
    "0000000000a85dc0",  # AH IEEE double -118.625 (X'C05DA80000000000'), low-order first
    "02",  # AMC
    "005c" "007d",  # AM(1) +5, AM(2) -7
    "02",  # GAC
    "455552" "01250c" "0100000000010000",  # GA(1): 'EUR', +12.50, 2**40 + 1 low-order first
    "555344" "00100d" "0200000000000000",  # GA(2): 'USD', -1.00, 2
    "034849",  # AV 'HI'
    "05deadbeef",  # AX: bytes have no byte order
    "03150d",  # AY -1.50
    "06004c4f4e47",  # AZ 'LONG': the 2-byte length low-order first
)))
EMPTY_IMAGE = bytes.fromhex("".join((  # mainframe form: Adabas' empty values
    "4040404040404040",  # AA blanks
    "0020002000200020",  # AW wide blanks
    "0000" "00000000" "0000000000000000" "00000000",  # AB, AC, AD, AF zeros
    "0000000c" "00000f" "f0f0f0f0",  # AP, AQ packed zeros, AU zoned zero
    "00000000" "0000000000000000",  # AG, AH float zeros
    "01" "000c",  # AMC 1, AM(1) packed zero
    "01" "404040" "00000c" "0000000000000000",  # GAC 1, GA(1): blanks, zero, zero
    "01" "01" "01" "0002",  # AV, AX, AY, AZ: lengths that count only themselves
)))

IBM_SHORT_TENTH = 0x19999A / 2**24  # what X'4019999A' holds exactly
IEEE_SINGLE_TENTH = 13421773 / 2**27  # X'3DCCCCCD' exactly
FULL = {
    "name": "MÜLLER", "wide": "日本", "b2": 258, "b4": 3_000_000_000,
    "b8": Decimal(2**63 + 5), "f4": -2, "amount": Decimal("-12345.67"), "qty": Decimal(12345),
    "zoned": Decimal("-123.4"), "g8": -118.625, "mu_count": 2, "mu": [Decimal(5), Decimal(-7)],
    "pe_count": 2, "pe": [{"gr": "EUR", "gs": Decimal("12.50"), "gt": Decimal(2**40 + 1)},
                          {"gr": "USD", "gs": Decimal("-1.00"), "gt": Decimal(2)}],
    "note": "HI", "blob": b"\xde\xad\xbe\xef", "vamount": Decimal("-1.50"), "long_text": "LONG"}
EXPECTED_KEEP = {
    1: {**FULL, "g4": IBM_SHORT_TENTH},
    2: {**FULL, "g4": IEEE_SINGLE_TENTH},
    3: {"name": "", "wide": "", "b2": 0, "b4": 0, "b8": Decimal(0), "f4": 0,
        "amount": Decimal("0.00"), "qty": Decimal(0), "zoned": Decimal("0.0"), "g4": 0.0,
        "g8": 0.0, "mu_count": 1, "mu": [Decimal(0)], "pe_count": 1,
        "pe": [{"gr": "", "gs": Decimal("0.00"), "gt": Decimal(0)}], "note": "", "blob": b"",
        "vamount": Decimal("0.00"), "long_text": ""}}
EXPECTED_NULL = {
    **EXPECTED_KEEP,
    3: {**dict.fromkeys(VALUES), "mu_count": 1, "mu": [None], "pe_count": 1,
        "pe": [{"gr": None, "gs": None, "gt": None}]}}
SPARK_TYPES = {
    "name": "string", "wide": "string", "b2": "int", "b4": "bigint", "b8": "decimal(20,0)",
    "f4": "int", "amount": "decimal(7,2)", "qty": "decimal(5,0)", "zoned": "decimal(4,1)",
    "g4": "double", "g8": "double", "mu_count": "int", "mu": "array<decimal(3,0)>",
    "pe_count": "int", "pe": "array<struct<gr:string,gs:decimal(5,2),gt:decimal(20,0)>>",
    "note": "string", "blob": "binary", "vamount": "decimal(29,2)", "long_text": "string"}


def _color(text: str, code: int) -> bytes:
    """A COLOR/4 image (AA,16,A,AB,16,U) by hand: cp037 text, 16 zoned digits."""
    digits = f"{code:016d}"
    return text.encode("cp037").ljust(16, b"\x40") + bytes(0xF0 | int(d) for d in digits)


class Batch:
    """A (table, json, blob) batch with images given as bytes, of any type and form."""

    def __init__(self) -> None:
        self.tables: dict[str, list[dict]] = {"transactions": [], "records": [], "images": []}

    def tx(self, tsnr: int, sec: int, fnr: int, records: list[tuple]) -> Batch:
        """records: (isn, record type, [(image type, payload, (acode, wcode, arc)), …])."""
        names = {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr}
        self.tables["transactions"].append({
            **names, "dbid": 10006, "record_count": len(records), "origin": "live",
            "commit_time": T0 + timedelta(seconds=sec), "initial_state": False,
            "landed_at": T0})
        for rsnr, (isn, typ, images) in enumerate(records, start=1):
            self.tables["records"].append({**names, "rsnr": rsnr, "fnr": fnr, "isn": isn,
                                           "type": typ, "dcnt": len(images)})
            for dsnr, (image_type, payload, (acode, wcode, arc)) in enumerate(images, start=1):
                self.tables["images"].append({
                    **names, "rsnr": rsnr, "dsnr": dsnr, "image_type": image_type,
                    "payload": payload, "acode": acode, "wcode": wcode, "arc": arc})
        return self

    def frame(self, spark):
        return spark.createDataFrame(to_output(self.tables), OUTPUT_DDL)


def _batch() -> Batch:
    batch = Batch()
    for fnr in (KEEP, NULL):
        batch.tx(fnr * 10 + 1, 10, fnr, [(1, "I", [("A", MAINFRAME_IMAGE, MAINFRAME)]),
                                         (2, "I", [("A", INTEL_IMAGE, INTEL)]),
                                         (3, "I", [("A", EMPTY_IMAGE, MAINFRAME)])])
    # COLOR/4 with K images besides the A/B ones: one the record layout would decode (a
    # garbage change row), one it would not (quarantined)
    ebcdic = (0, 0, 0)
    batch.tx(1, 20, 4, [(11, "I", [("K", _color("GOLD", 0), ebcdic),
                                   ("A", _color("GOLD", 3), ebcdic)])])
    batch.tx(2, 30, 4, [(10, "I", [("A", _color("RED", 1), ebcdic)]),
                        (10, "U", [("B", _color("RED", 1), ebcdic),
                                   ("K", _color("RED", 0), ebcdic),
                                   ("A", _color("PINK", 2), ebcdic)]),
                        (11, "D", [("K", "GOLD".encode("cp037").ljust(16, b"\x40"), ebcdic),
                                   ("B", _color("GOLD", 3), ebcdic)])])
    return batch


def _settings(base: Settings, lake: Path) -> Settings:
    color = next(lay for lay in base.layouts if lay.subscription == "COLOR")
    typed = [Layout(subscription="COLOR", dbid=10006, fnr=fnr, format_buffer=FORMAT_BUFFER,
                    columns=COLUMNS, groups=GROUPS, fdt=FDT, empty=empty, gfft="ignore")
             for fnr, empty in ((KEEP, "keep"), (NULL, "null"))]
    return base.model_copy(update={"layouts": [color, *typed], "stream": base.stream.model_copy(
        update={"lake_dir": str(lake)})})


@pytest.fixture(scope="module")
def landed(spark, test_settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    settings = _settings(test_settings, tmp_path_factory.mktemp("types") / "lake")
    ensure_tables(spark, settings)
    counts = land_typed(spark, _batch().tables, 0, settings, APP)
    return settings, counts


QUERIES = {
    "current": "SELECT isn, {values} FROM {t} ORDER BY isn",
    "changes": "SELECT isn, tsnr, image_type, {values} FROM {t} ORDER BY isn",
}


def _by_spark(spark, settings: Settings, table: str, query: str) -> list[dict[str, Any]]:
    sql = query.format(values=", ".join(VALUES), t=f"delta.`{table_path(settings, table)}`")
    return [r.asDict(recursive=True) for r in spark.sql(sql).collect()]


def _by_deltalake(settings: Settings, table: str, query: str) -> list[dict[str, Any]]:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    qb = QueryBuilder().register(table, DeltaTable(table_path(settings, table)))
    result = qb.execute(query.format(values=", ".join(VALUES), t=table)).read_all()
    return pa.table(result).to_pylist()


@pytest.mark.parametrize(("fnr", "expected"), [(KEEP, EXPECTED_KEEP), (NULL, EXPECTED_NULL)],
                         ids=["empty_keep", "empty_null"])
@pytest.mark.parametrize("kind", ["current", "changes"])
def test_every_type_lands_exactly_and_both_readers_agree(spark, landed, kind: str, fnr: int,
                                                         expected: dict) -> None:
    settings, counts = landed
    table = f"{kind}_color_{fnr}"
    by_spark = _by_spark(spark, settings, table, QUERIES[kind])
    assert by_spark == _by_deltalake(settings, table, QUERIES[kind])
    assert {r["isn"]: {v: r[v] for v in VALUES} for r in by_spark} == expected
    if kind == "changes":
        assert [(r["tsnr"], r["image_type"]) for r in by_spark] == [(fnr * 10 + 1, "A")] * 3
        assert counts[f"quarantine_{table}"] == 0


def test_floats_within_tolerance_of_their_source_and_column_types(spark, landed) -> None:
    settings = landed[0]
    rows = {r["isn"]: r for r in _by_spark(spark, settings, "current_color_7",
                                            QUERIES["current"])}
    # IBM short keeps 24 fraction bits, IEEE single 24 significant bits: 0.1 to ~1e-7
    assert rows[1]["g4"] == pytest.approx(0.1, rel=2**-20) and rows[1]["g4"] != 0.1
    assert rows[2]["g4"] == pytest.approx(0.1, rel=2**-23)
    assert rows[1]["g8"] == rows[2]["g8"] == -118.625  # exact in IBM long and IEEE double
    for table in ("changes_color_7", "current_color_7", "current_color_8"):
        schema = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(
            table_path(settings, table)).schema.fields}
        assert {c: schema[c] for c in SPARK_TYPES} == SPARK_TYPES, table


def test_k_images_stay_out_of_the_typed_tables(spark, landed) -> None:
    settings, counts = landed
    assert counts["quarantine_changes_color_4"] == 0
    assert spark.read.format("delta").load(table_path(settings, "quarantine")).count() == 0
    changes = sorted((r.tsnr, r.isn, r.image_type, r.color, r.code) for r in spark.read.format(
        "delta").load(table_path(settings, "changes_color_4")).collect())
    assert changes == [(1, 11, "A", "GOLD", 3), (2, 10, "A", "PINK", 2),
                       (2, 10, "A", "RED", 1), (2, 10, "B", "RED", 1),
                       (2, 11, "B", "GOLD", 3)]
    current = {r.isn: (r.color, r.code, r.verified) for r in spark.read.format("delta").load(
        table_path(settings, "current_color_4")).collect()}
    assert current == {10: ("PINK", 2, True)}, "ISN 11 inserted then deleted"
