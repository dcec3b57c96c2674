"""URBD image bytes -> typed values, driven by a :class:`~.layout.RecordLayout`.

One small decoder per Adabas format in a dispatch table (``DECODERS``), a cursor that walks the
layout, and :class:`PayloadDecoder`, which resolves code pages and architecture once so a Spark
partition can decode many images of one file with the same object.  Every problem with an
image raises :class:`~.errors.PayloadError` naming the field and the byte offset: the job
quarantines the image with that reason.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Literal

from .arch import Form, payload_form
from .errors import PayloadError
from .ibmfloat import ibm_to_float
from .layout import FieldSpec, Filler, GroupSpec, RecordLayout

Empty = Literal["keep", "null"]
Decoder = Callable[[bytes, FieldSpec, Form], object]

_POSITIVE = frozenset("acef")  # packed sign nibbles (C and F preferred; A and E per IBM)
_NEGATIVE = frozenset("bd")
#: Zone of a zoned number's last byte -> negative?, per plus-zone family (EBCDIC F, ASCII 3).
_SIGN_ZONES: dict[int, dict[int, bool]] = {
    0xF0: {0xF0: False, 0xC0: False, 0xA0: False, 0xE0: False, 0xD0: True, 0xB0: True},
    0x30: {0x30: False, 0x70: True},
}


class _Bad(Exception):
    """Raised inside a decoder; the cursor turns it into a PayloadError with field/offset."""

    def __init__(self, reason: str, at: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


def _alpha(raw: bytes, spec: FieldSpec, form: Form) -> str:
    return raw.decode(form.text).rstrip(" ")


def _wide(raw: bytes, spec: FieldSpec, form: Form) -> str:
    return raw.decode(form.wide).rstrip(" ")


def _binary(raw: bytes, spec: FieldSpec, form: Form) -> int | bytes:
    if len(raw) > 8:  # a binary string (GUIDs, bit maps): no byte order to apply
        return bytes(raw)
    return int.from_bytes(raw, "big" if form.big_endian else "little")


def _fixed(raw: bytes, spec: FieldSpec, form: Form) -> int:
    return int.from_bytes(raw, "big" if form.big_endian else "little", signed=True)


def _decimal(negative: bool, digits: str, scale: int) -> Decimal:
    return Decimal(f"{'-' if negative else ''}{digits}E-{scale}")


def _packed(raw: bytes, spec: FieldSpec, form: Form) -> Decimal:
    nibbles = raw.hex()
    digits, sign = nibbles[:-1], nibbles[-1]
    if not digits.isdigit():
        bad = next(i for i, c in enumerate(digits) if not c.isdigit())
        raise _Bad(f"packed digit nibble X'{digits[bad].upper()}' is not 0-9", bad // 2)
    if sign in _POSITIVE or sign in _NEGATIVE:
        return _decimal(sign in _NEGATIVE, digits, spec.scale)
    if not any(raw):  # binary zeros: an empty value written without a sign
        return _decimal(False, "0", spec.scale)
    raise _Bad(f"packed sign nibble X'{sign.upper()}' is not C, D, F (or A, B, E)", len(raw) - 1)


def _zoned(raw: bytes, spec: FieldSpec, form: Form) -> Decimal:
    if not any(raw):  # binary zeros: empty value
        return _decimal(False, "0", spec.scale)
    signs = _SIGN_ZONES[form.zone]
    for i, byte in enumerate(raw):
        if byte & 0x0F > 9:
            raise _Bad(f"zoned digit X'{byte:02X}' is not 0-9", i)
        if i < len(raw) - 1 and byte & 0xF0 != form.zone:
            raise _Bad(
                f"zoned byte X'{byte:02X}' has zone {byte >> 4:X}, not {form.zone >> 4:X}", i
            )
    negative = signs.get(raw[-1] & 0xF0)
    if negative is None:
        raise _Bad(f"zoned sign zone {raw[-1] >> 4:X} is not a sign", len(raw) - 1)
    digits = "".join(chr(48 + (b & 0x0F)) for b in raw)
    return _decimal(negative, digits, spec.scale)


_IEEE = {(4, True): ">f", (4, False): "<f", (8, True): ">d", (8, False): "<d"}


def _float(raw: bytes, spec: FieldSpec, form: Form) -> float:
    if form.floats == "ibm":
        return ibm_to_float(raw if form.big_endian else raw[::-1])
    return struct.unpack(_IEEE[len(raw), form.big_endian], raw)[0]


#: Adabas format -> decoder of one value's bytes.
DECODERS: dict[str, Decoder] = {
    "A": _alpha,
    "W": _wide,
    "B": _binary,
    "F": _fixed,
    "P": _packed,
    "U": _zoned,
    "G": _float,
}


def _variable_value(raw: bytes, spec: FieldSpec, form: Form) -> object:
    """A variable-length value's bytes decoded: B stays bytes, no bytes (a length prefix that
    counts only itself) is the format's empty value."""
    if spec.format == "B":
        return bytes(raw)
    if not raw:
        return _decimal(False, "0", spec.scale) if spec.format in "PU" else ""
    return DECODERS[spec.format](raw, spec, form)


def is_empty(value: object) -> bool:
    """Adabas' empty value: blanks for A/W, zero for numbers, binary zeros for B strings."""
    if isinstance(value, bytes):
        return not any(value)
    return value == "" or value == 0


class PayloadDecoder:
    """Decode images of one layout in one form (build once, call ``decode`` per image)."""

    def __init__(self, layout: RecordLayout, form: Form, *, empty: Empty = "keep") -> None:
        if empty not in ("keep", "null"):
            raise ValueError(f"empty must be 'keep' or 'null', not {empty!r}")
        self.layout = layout
        self.form = form
        self.null_empty = empty == "null"

    def decode(self, payload: bytes) -> dict[str, object]:
        out: dict[str, object] = {}
        counts: dict[str, int] = {}
        offset = 0
        for item in self.layout.items:
            if isinstance(item, Filler):
                offset = self._take(item.length, "filler", payload, offset)
            elif isinstance(item, GroupSpec):
                out[item.column], offset = self._group(item, payload, offset, counts)
            elif item.repeated:
                n = self._occurrences(item, counts, payload, offset, item.min_size)
                values = []
                for i in range(n):
                    value, offset = self._field(item, payload, offset, f"{item.name}[{i + 1}]")
                    values.append(value)
                out[item.column] = values
            else:
                value, offset = self._field(item, payload, offset, item.name, counts)
                out[item.column] = value
        if offset != len(payload):
            raise PayloadError("", offset, f"{len(payload) - offset} bytes after the last field")
        return out

    def _take(self, length: int, label: str, payload: bytes, offset: int) -> int:
        if offset + length > len(payload):
            left = len(payload) - offset
            raise PayloadError(label, offset, f"needs {length} bytes, payload has {left} left")
        return offset + length

    def _field(
        self,
        spec: FieldSpec,
        payload: bytes,
        offset: int,
        label: str,
        counts: dict[str, int] | None = None,
    ) -> tuple[object, int]:
        if spec.length:  # fixed length (not the ``variable`` property: this is the hot path)
            start = offset
            end = self._take(spec.length, label, payload, offset)
            decoder = DECODERS[spec.format]
        else:
            start, end = self._variable(spec, payload, offset, label)
            decoder = _variable_value
        try:
            value = decoder(payload[start:end], spec, self.form)
        except _Bad as bad:
            raise PayloadError(label, start + bad.at, bad.reason) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise PayloadError(label, start, f"{spec.format} value: {exc}") from None
        if counts is not None and spec.counts is not None:
            counts[spec.name] = _count_value(value, label, offset)
        if self.null_empty and is_empty(value):
            value = None
        return value, end

    def _variable(
        self, spec: FieldSpec, payload: bytes, offset: int, label: str
    ) -> tuple[int, int]:
        """Where a variable-length value's bytes start and end: after its length prefix,
        whose value counts the prefix itself (read in the payload's integer byte order)."""
        start = self._take(spec.prefix, f"{label} length", payload, offset)
        total = int.from_bytes(payload[offset:start], "big" if self.form.big_endian else "little")
        if total < spec.prefix:
            raise PayloadError(
                label,
                offset,
                f"variable length {total} is shorter than its {spec.prefix}-byte length prefix",
            )
        return start, self._take(total, label, payload, offset)

    def _occurrences(
        self,
        item: FieldSpec | GroupSpec,
        counts: dict[str, int],
        payload: bytes,
        offset: int,
        size: int,
    ) -> int:
        if item.count_field is None:
            return item.occurrences or 0
        n = counts[item.count_field]
        if offset + n * size > len(payload):
            left = len(payload) - offset
            reason = f"count {item.count_field}={n} needs {n * size} bytes, {left} left"
            raise PayloadError(item.name, offset, reason)
        return n

    def _group(
        self, group: GroupSpec, payload: bytes, offset: int, counts: dict[str, int]
    ) -> tuple[list[dict[str, object]], int]:
        n = self._occurrences(group, counts, payload, offset, group.length)
        rows: list[dict[str, object]] = []
        for i in range(n):
            row: dict[str, object] = {}
            for member in group.members:
                label = f"{group.name}[{i + 1}].{member.name}"
                row[member.column], offset = self._field(member, payload, offset, label)
            rows.append(row)
        return rows, offset


def _count_value(value: object, label: str, offset: int) -> int:
    if isinstance(value, bytes | float) or int(value) != value or int(value) < 0:  # type: ignore[call-overload]
        raise PayloadError(label, offset, f"count field value {value!r} is not a count")
    return int(value)  # type: ignore[call-overload]


def decode_payload(
    payload: bytes,
    layout: RecordLayout,
    *,
    codepage: str = "cp037",
    ebcdic: bool = True,
    acode: int = 0,
    wcode: int = 0,
    arc: int = 0,
    big_endian: bool | None = None,
    empty: Empty = "keep",
) -> dict[str, object]:
    """Typed values of one image, by column.  See :func:`.arch.payload_form` for the form
    arguments (URBTACOD, URBTWCOD, URBTARC and the message's own form)."""
    form = payload_form(
        codepage=codepage, ebcdic=ebcdic, acode=acode, wcode=wcode, arc=arc, big_endian=big_endian
    )
    return PayloadDecoder(layout, form, empty=empty).decode(payload)
