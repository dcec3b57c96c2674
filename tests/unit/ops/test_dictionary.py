"""The data dictionary without Spark: every column of every table the job writes has its
meaning and nullability (the text its Delta comment carries), the typed value columns name
their Adabas field, and DATA_DICTIONARY.md is what the generator prints today (a page left
stale by a schema change fails here)."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import load_settings
from pipeline.ops import dictionary
from pipeline.payload import layout_from_gfft
from pipeline.payload.gfft import gfft_from_layout, gfft_view
from pipeline.spark.land.dictionary import column_doc
from pipeline.spark.land.tables import SCHEMAS
from pipeline.spark.typed.dictionary import fixed_doc, value_comments
from pipeline.spark.typed.tables import table_kinds, typed_tables

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "DATA_DICTIONARY.md"


def test_every_column_of_every_table_is_documented() -> None:
    for table, ddl in SCHEMAS.items():
        for name, _ in dictionary.columns(f"{ddl}, batch_id bigint"):
            doc = column_doc(table, name)  # KeyError: a column nobody described
            assert doc.text.endswith(".") and doc.null, (table, name)
    settings = load_settings(ROOT / "conf" / "local.yaml", env={})
    for lay in settings.layouts:
        lay = lay.model_copy(update={"history": True})
        kinds = table_kinds(lay)
        values = value_comments([lay.conf_layout()])
        for name, ddl in typed_tables(lay):
            for column, _ in dictionary.columns(ddl):
                assert fixed_doc(kinds[name], column) or column in values, (name, column)


def test_typed_columns_name_their_adabas_field_with_the_gfft_long_name() -> None:
    settings = load_settings(ROOT / "conf" / "local.yaml", env={})
    lay = next(x for x in settings.layouts if x.fnr == 11)
    conf = lay.conf_layout()
    assert value_comments([conf])["salary"].startswith(
        "Adabas field AS: format P, length 5, scale 2. Layout: conf format buffer.")
    urbf = {"urbfgfid": "GFB1", "urbftim1": 0x1234 << 12, "urbfdbid": 10006, "urbffnr": 11,
            "groups": gfft_from_layout(conf)}
    version = layout_from_gfft(gfft_view(urbf), lay.columns)
    text = value_comments([conf, version])["salary"]
    assert text.startswith("Adabas field AS (SALARY): format P, length 5, scale 2. Layout: "
                           "GFFT GFB1@"), "the newest layout that names it, long name included"


def test_the_committed_page_is_current() -> None:
    assert dictionary.main(["--check", str(PAGE)]) == 0, (
        "DATA_DICTIONARY.md is stale: .venv/bin/python -m pipeline.ops.dictionary > "
        "DATA_DICTIONARY.md")
