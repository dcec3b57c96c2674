"""Many images of one layout and one form at once, field by field over numpy byte columns.

Why: ``PayloadDecoder`` walks one image field by field in Python, ~50-100 µs per image of a
few fields; the direct typed writer decodes every after and before image of a batch (a
20,000-message batch holds ~400,000). Images of one layout in one form (ACODE, WCODE, ARC)
have every fixed-length field at the same offset, so each field is one slice of an
``images × bytes`` array, decoded for all images at once.

Exactness: only what the row decoder would decode without a question is decoded here; every
image this module is not sure of — another length than the layout's, a digit or sign nibble
or zone the row decoder refuses, a byte the code page does not map on its own, a NUL in
text, more digits than an int64 holds — is marked ``unsure`` and the caller decodes it with
``PayloadDecoder`` (values or the exact error). Layouts with items this module does not
decode (MU/PE fields, PE groups, variable lengths, W and G fields, B over 8 bytes) return
None: the caller decodes them row by row. ``tests/unit/payload/test_columns.py`` holds the two to
the same values and errors on random layouts and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from pipeline.arrow_bytes import binary_spans

from .arch import Form
from .layout import FieldSpec, Filler, RecordLayout

if TYPE_CHECKING:
    import pyarrow as pa

#: Formats decoded here (fixed lengths only): A text, B ≤ 8 bytes, F, P and U ≤ 18 digits.
COLUMNAR_FORMATS = frozenset("ABFPU")
_MAX_DIGITS = 18  # an int64 holds every 18-digit number
_SPACE = 0x20
_WIDE = 0xFF  # _ascii_table: not an ASCII character on its own
_SIGN_NEGATIVE = {0xF0: {0xD0, 0xB0}, 0x30: {0x70}}  # zoned: negative zones per family
_SIGN_ANY = {0xF0: {0xF0, 0xC0, 0xA0, 0xE0, 0xD0, 0xB0}, 0x30: {0x30, 0x70}}


@dataclass(frozen=True)
class Decoded:
    """Values by column (Arrow arrays, the row decoder's Spark types) and which images the
    caller must decode itself (``unsure``: True)."""

    columns: dict[str, pa.Array]
    unsure: np.ndarray


def columnar(layout: RecordLayout) -> bool:
    """Whether every item of ``layout`` is decoded here."""
    for item in layout.items:
        if isinstance(item, Filler):
            continue
        if not isinstance(item, FieldSpec) or item.repeated or item.variable:
            return False
        if item.format not in COLUMNAR_FORMATS or (item.format == "B" and item.length > 8):
            return False
        if item.format in "PU" and item.digits > _MAX_DIGITS:
            return False
    return True


def _size(layout: RecordLayout) -> int:
    return sum(item.length for item in layout.items)  # type: ignore[union-attr]


@cache
def _text_table(codec: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Code point and 'decodes on its own' of every byte in a code page whose bytes decode
    one by one to what a run of them decodes to (single-byte pages; UTF-8's ASCII half);
    None for a page where that does not hold (stateful or multi-byte pages)."""
    points = np.zeros(256, np.uint32)
    alone = np.zeros(256, bool)
    chars = []
    for byte in range(256):
        try:
            char = bytes([byte]).decode(codec)
        except (UnicodeDecodeError, ValueError):
            continue
        if len(char) != 1:
            continue
        points[byte], alone[byte] = ord(char), True
        chars.append(char)
    run = bytes(int(b) for b in np.flatnonzero(alone))
    try:
        same = run.decode(codec) == "".join(chars)
    except (UnicodeDecodeError, ValueError):
        same = False
    return (points, alone) if same and alone.any() else None


def decode_block(payloads: pa.Array, layout: RecordLayout, form: Form,
                 empty: str = "keep") -> Decoded | None:
    """The images' values by column, or None when ``layout`` is not ``columnar``.
    ``payloads``: an Arrow binary array (one image each; null: none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not columnar(layout):
        return None
    n, size = len(payloads), _size(layout)
    lengths = pc.fill_null(pc.binary_length(payloads), -1).to_numpy(zero_copy_only=False)
    unsure = lengths != size
    block = np.zeros((n, size), np.uint8)
    fit = np.flatnonzero(~unsure)
    if len(fit):
        # the images of the layout's length, contiguous in one binary array's data buffer
        buf, starts, ends = binary_spans(payloads.take(pa.array(fit)))
        block[fit] = buf[starts[0]:ends[-1]].reshape(len(fit), size)
    columns: dict[str, pa.Array] = {}
    offset = 0
    for item in layout.items:
        if isinstance(item, FieldSpec):
            raw = block[:, offset:offset + item.length]
            values, bad, null = _FIELD[item.format](raw, item, form)
            unsure |= bad
            if empty == "null":
                null = null | _is_empty(values, item)
            columns[item.column] = _with_nulls(values, null) if null.any() else values
        offset += item.length
    return Decoded(columns, unsure)


def _with_nulls(values: pa.Array, null: np.ndarray) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pa.array(null), pa.nulls(len(values), values.type), values)


def _is_empty(values: pa.Array, item: FieldSpec) -> np.ndarray:
    """``is_empty``: blanks for text (after the strip, nothing), zero for numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if item.format == "A":
        zero = pa.scalar("", pa.string())
    else:
        zero = pa.scalar(Decimal(0) if pa.types.is_decimal(values.type) else 0, values.type)
    return pc.fill_null(pc.equal(values, zero), False).to_numpy(zero_copy_only=False)


def _alpha(raw: np.ndarray, spec: FieldSpec, form: Form
           ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    import pyarrow as pa

    n, width = raw.shape
    table = _text_table(form.text)
    if table is None:
        return pa.nulls(n, pa.string()), np.ones(n, bool), np.zeros(n, bool)
    narrow = _ascii_table(form.text)[raw]
    if not (narrow == _WIDE).any():  # all ASCII: a byte per character, the UTF-8 text
        bad = (narrow == 0).any(axis=1)  # NUL: the strip would differ
        return _ascii(narrow, _kept(narrow != _SPACE)), bad, np.zeros(n, bool)
    points, alone = table
    code = points[raw]
    bad = ~alone[raw].all(axis=1) | (code == 0).any(axis=1)
    kept = _kept(code != _SPACE)
    code = np.where(np.arange(width) < kept[:, None], code, 0).astype("<u4")
    text = np.ascontiguousarray(code).view(f"<U{width}").reshape(n)
    return pa.array(text, pa.string()), bad, np.zeros(n, bool)


def _kept(nonblank: np.ndarray) -> np.ndarray:
    """Each row's characters before its trailing blanks."""
    kept = nonblank.shape[1] - np.argmax(np.flip(nonblank, 1), axis=1)
    kept[~nonblank.any(axis=1)] = 0
    return kept


@cache
def _ascii_table(codec: str) -> np.ndarray:
    """Each byte's ASCII code as one byte, ``_WIDE`` for a byte that is not an ASCII
    character on its own: a field of ASCII bytes only is translated a byte per byte (a
    quarter of the memory of the code points ``_text_table`` gives)."""
    narrow = np.full(256, _WIDE, np.uint8)
    table = _text_table(codec)
    if table is not None:
        points, alone = table
        ascii_ = alone & (points < 0x80)
        narrow[ascii_] = points[ascii_]
    return narrow


def _ascii(chars: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A string array of each row's first ``lengths`` ASCII bytes, built from buffers."""
    import pyarrow as pa

    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = chars[np.arange(chars.shape[1]) < lengths[:, None]]
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets.tobytes()),
                                       pa.py_buffer(data.tobytes()))


def _unsigned(raw: np.ndarray, big_endian: bool) -> np.ndarray:
    order = range(raw.shape[1]) if big_endian else range(raw.shape[1] - 1, -1, -1)
    value = np.zeros(raw.shape[0], np.uint64)
    for i in order:
        value = (value << np.uint64(8)) | raw[:, i].astype(np.uint64)
    return value


def _binary(raw: np.ndarray, spec: FieldSpec, form: Form
            ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    import pyarrow as pa

    n, length = raw.shape
    value = _unsigned(raw, form.big_endian)
    if length <= 2:
        out = pa.array(value.astype(np.int32), pa.int32())
    elif length <= 4:
        out = pa.array(value.astype(np.int64), pa.int64())
    else:
        out = pa.array(value, pa.uint64()).cast(pa.decimal128(20, 0))
    return out, np.zeros(n, bool), np.zeros(n, bool)


def _fixed(raw: np.ndarray, spec: FieldSpec, form: Form
           ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    import pyarrow as pa

    n, length = raw.shape
    value = _unsigned(raw, form.big_endian).view(np.int64)
    if length < 8:
        top = np.int64(1) << np.int64(8 * length)
        value = np.where(value >= top >> np.int64(1), value - top, value)
    kind = pa.int32() if length <= 4 else pa.int64()
    return pa.array(value.astype(kind.to_pandas_dtype()), kind), np.zeros(n, bool), \
        np.zeros(n, bool)


def _digits_value(digits: np.ndarray) -> np.ndarray:
    value = np.zeros(digits.shape[0], np.int64)
    for i in range(digits.shape[1]):
        value = value * np.int64(10) + digits[:, i].astype(np.int64)
    return value


def _decimal(value: np.ndarray, negative: np.ndarray, precision: int, scale: int) -> pa.Array:
    """A decimal128 array from int64 unscaled values (two's complement, little-endian)."""
    import pyarrow as pa

    signed = np.where(negative, -value, value).astype(np.int64)
    data = np.empty(2 * len(signed), np.uint64)
    data[0::2] = signed.view(np.uint64)
    data[1::2] = np.where(signed < 0, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64(0))
    return pa.Array.from_buffers(pa.decimal128(precision, scale), len(signed),
                                 [None, pa.py_buffer(data.tobytes())])


def _packed(raw: np.ndarray, spec: FieldSpec, form: Form
            ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    nibbles = np.empty((raw.shape[0], 2 * raw.shape[1]), np.uint8)
    nibbles[:, 0::2] = raw >> 4
    nibbles[:, 1::2] = raw & 0x0F
    digits, sign = nibbles[:, :-1], nibbles[:, -1]
    zero = ~raw.any(axis=1)
    bad = ((digits > 9).any(axis=1) | (sign < 0x0A)) & ~zero
    negative = (sign == 0x0B) | (sign == 0x0D)
    value = _digits_value(np.minimum(digits, 9))
    return (_decimal(np.where(zero, 0, value), negative & ~zero, spec.digits, spec.scale), bad,
            np.zeros(raw.shape[0], bool))


def _zoned(raw: np.ndarray, spec: FieldSpec, form: Form
           ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    zero = ~raw.any(axis=1)
    low, zone = raw & 0x0F, raw & 0xF0
    signs = np.isin(zone[:, -1], list(_SIGN_ANY[form.zone]))
    bad = ((low > 9).any(axis=1) | (zone[:, :-1] != form.zone).any(axis=1) | ~signs) & ~zero
    negative = np.isin(zone[:, -1], list(_SIGN_NEGATIVE[form.zone])) & ~zero
    value = _digits_value(np.minimum(low, 9))
    return (_decimal(np.where(zero, 0, value), negative, spec.digits, spec.scale), bad,
            np.zeros(raw.shape[0], bool))


_FIELD = {"A": _alpha, "B": _binary, "F": _fixed, "P": _packed, "U": _zoned}
