"""Column-wise decoding (``pipeline.typed.decoding.decode_table`` over ``pipeline.payload.columns``)
gives, image for image, what ``PayloadDecoder`` gives: the same values in the same Spark types,
the same error text for the same bad images — on random layouts of every format, both forms,
``empty`` keep and null, encoded images, bytes flipped at random, and wrong lengths."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.payload import encode_payload, parse_format_buffer, spark_type
from pipeline.payload.columns import columnar
from pipeline.payload.layout import FieldSpec
from pipeline.typed.decoding import DecodeSpec, decode_one, decode_table
from tests.unit.payload.test_properties import FORMS, _text, decimals

#: Spark type name -> the Arrow type the tables hold it in.
ARROW = {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(),
         "double": pa.float64(), "binary": pa.binary()}


def _arrow(spark: str) -> pa.DataType:
    if spark.startswith("decimal("):
        p, s = spark[len("decimal("):-1].split(",")
        return pa.decimal128(int(p), int(s))
    return ARROW[spark]


@st.composite
def fields(draw: st.DrawFn, i: int) -> tuple[str, FieldSpec | None]:
    """One format-buffer item (name A<i>…) and a value strategy for it (None: a filler)."""
    kind = draw(st.sampled_from("AAABBFFPPPUUUXGW"))  # G, W: the row decoder's only
    name = f"A{chr(65 + i)}"
    if kind == "X":
        return f"{draw(st.integers(1, 3))}X", None
    if kind == "A":
        n = draw(st.integers(1, 20))
        return f"{name},{n},A", _text(n)
    if kind == "B":
        n = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 9]))
        return f"{name},{n},B", (st.integers(0, (1 << (8 * n)) - 1) if n <= 8
                                 else st.binary(min_size=n, max_size=n))
    if kind == "F":
        n = draw(st.sampled_from([1, 2, 4, 8]))
        half = 1 << (8 * n - 1)
        return f"{name},{n},F", st.integers(-half, half - 1)
    if kind == "G":
        return f"{name},8,G", st.floats(-1e6, 1e6, allow_nan=False)
    if kind == "W":
        return f"{name},4,W", st.sampled_from(["", "ab", "x"])
    n = draw(st.integers(1, 10))
    digits = 2 * n - 1 if kind == "P" else n
    scale = draw(st.integers(0, min(digits, 3)))
    return f"{name},{n},{kind},{scale}", decimals(digits, scale)


@st.composite
def cases(draw: st.DrawFn) -> tuple[DecodeSpec, list[bytes | None], dict]:
    items = [draw(fields(i)) for i in range(draw(st.integers(1, 6)))]
    layout = parse_format_buffer(",".join(b for b, _ in items) + ".")
    form = draw(FORMS)
    spec = DecodeSpec(layout, ebcdic=form.get("ebcdic", True),
                      codepage=form.get("codepage", "cp037"),
                      empty=draw(st.sampled_from(["keep", "null"])))
    images: list[bytes | None] = []
    for _ in range(draw(st.integers(1, 12))):
        values = {f.column: draw(s) for f, s in _strategies(layout, items)}
        image = bytearray(encode_payload(values, layout, **form))
        mess = draw(st.sampled_from(["none", "none", "flip", "zeros", "cut", "long", "null"]))
        if mess == "flip" and image:
            at = draw(st.integers(0, len(image) - 1))
            image[at] = draw(st.integers(0, 255))
        elif mess == "zeros":
            image = bytearray(len(image))
        elif mess == "cut" and image:
            image = image[:-1]
        elif mess == "long":
            image += b"\x40"
        images.append(None if mess == "null" else bytes(image))
    return spec, images, form


def _strategies(layout, items):
    fields_ = [i for i in layout.items if isinstance(i, FieldSpec)]
    strategies = [s for _, s in items if s is not None]
    return list(zip(fields_, strategies, strict=True))


def _expected(spec: DecodeSpec, images: list[bytes | None], form: dict, types: dict):
    cache: dict = {}
    rows, errors = [], []
    for image in images:
        row, error = decode_one(spec, cache, image, form.get("acode", 0), 0, form.get("arc", 0))
        rows.append(row)
        errors.append(error)
    columns = {c: pa.array([None if r is None else r.get(c) for r in rows], t).to_pylist()
               for c, t in types.items()}
    return columns, errors


@settings(max_examples=400, deadline=None)
@given(cases())
def test_column_wise_decoding_is_the_row_decoder(case) -> None:
    spec, images, form = case
    types = {f.column: _arrow(spark_type(f)) for f in spec.layout.items
             if isinstance(f, FieldSpec)}
    table = pa.table({"payload": pa.array(images, pa.binary()),
                      "acode": pa.array([form.get("acode", 0)] * len(images), pa.int64()),
                      "wcode": pa.array([0] * len(images), pa.int64()),
                      "arc": pa.array([form.get("arc", 0)] * len(images), pa.int32())})
    got, errors = decode_table(table, spec, types)
    want, want_errors = _expected(spec, images, form, types)
    assert errors == want_errors
    assert {c: a.to_pylist() for c, a in got.items()} == want


def test_the_bench_layouts_are_decoded_column_wise() -> None:
    """COLOR's and EMPLOYEE's format buffers (the simulator's fields) need no row decoder."""
    for buffer in ("AA,16,A,AB,16,U.",
                   "AA,8,A,AC,20,A,AE,20,A,AH,4,P,AN,6,A,AS,5,P,2,AT,4,B,AO,30,A."):
        assert columnar(parse_format_buffer(buffer))


def test_negative_zero_blanks_and_binary_zeros() -> None:
    """A packed/zoned minus zero, blanks and binary zeros with ``empty: null``."""
    layout = parse_format_buffer("AP,2,P,AU,2,U,AA,3,A.")
    spec = DecodeSpec(layout, ebcdic=True, empty="null")
    images = [bytes.fromhex("000DF0D0404040"), bytes(7), bytes.fromhex("123CF1F2C1C2C3")]
    table = pa.table({"payload": images, "acode": [0] * 3, "wcode": [0] * 3, "arc": [0] * 3})
    types = {"ap": pa.decimal128(3, 0), "au": pa.decimal128(2, 0), "aa": pa.string()}
    got, errors = decode_table(table, spec, types)
    want, want_errors = _expected(spec, images, {}, types)
    assert errors == want_errors == [None, None, None]
    assert {c: a.to_pylist() for c, a in got.items()} == want
    assert want["ap"] == [None, None, Decimal(123)] and want["aa"] == [None, "\x00" * 3, "ABC"]


def test_text_the_row_decoder_must_see_is_left_to_it() -> None:
    """A NUL in a text field (the row decoder's strip differs) marks the image for the row
    decoder, in a block of ASCII text (a byte per character) and in one with a character
    beyond it (code points); plain text does not (both forms)."""
    from pipeline.payload.arch import payload_form
    from pipeline.payload.columns import decode_block

    layout = parse_format_buffer("AA,4,A.")
    for ebcdic in (True, False):
        form = payload_form(ebcdic=ebcdic)
        for texts in (("AB  ", "A\x00B ", "    "), ("Ä B ", "A\x00B ", "    ")):
            images = [t.encode(form.text) for t in texts]
            got = decode_block(pa.array(images, pa.binary()), layout, form)
            assert got is not None
            assert got.unsure.tolist() == [False, True, False]
            values = got.columns["aa"].to_pylist()
            assert (values[0], values[2]) == (texts[0].rstrip(), "")
