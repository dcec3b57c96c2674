"""Typed values -> image bytes: the inverse of :mod:`.decode`, for tests and the simulator.

Writes what Adabas writes: A/W padded with blanks, P with sign C/D, U with zone F/D (EBCDIC)
or 3/7 (ASCII) on the last byte, B unsigned and F signed in the form's byte order, G as IBM or
IEEE float; a variable-length value (length 0) as its length prefix and as few bytes as it
needs.  ``None`` encodes the empty value.  Values that do not fit raise
:class:`~.errors.PayloadError` naming the field and offset, like the decoder.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import replace
from decimal import Context, Decimal
from typing import Any

from .arch import Form, payload_form
from .errors import PayloadError
from .ibmfloat import float_to_ibm
from .layout import FieldSpec, Filler, GroupSpec, RecordLayout

Encoder = Callable[[object, FieldSpec, Form], bytes]
_EXACT = Context(prec=80)  # P/U hold up to 29 digits; the default context rounds at 28


def _pad(data: bytes, spec: FieldSpec, blank: bytes) -> bytes:
    room = spec.length - len(data)
    if room < 0:
        raise ValueError(f"{len(data)} bytes do not fit {spec.length}")
    if room % len(blank):
        raise ValueError(f"{spec.length} bytes cannot be filled with {len(blank)}-byte blanks")
    return data + blank * (room // len(blank))


def _alpha(value: object, spec: FieldSpec, form: Form) -> bytes:
    return _pad(str(value or "").encode(form.text), spec, form.blank)


def _wide(value: object, spec: FieldSpec, form: Form) -> bytes:
    return _pad(str(value or "").encode(form.wide), spec, " ".encode(form.wide))


def _order(form: Form) -> str:
    return "big" if form.big_endian else "little"


def _binary(value: object, spec: FieldSpec, form: Form) -> bytes:
    if spec.length > 8:
        return _pad(bytes(value or b""), spec, b"\x00")  # type: ignore[arg-type]
    return int(value or 0).to_bytes(spec.length, _order(form))  # type: ignore[call-overload]


def _fixed(value: object, spec: FieldSpec, form: Form) -> bytes:
    return int(value or 0).to_bytes(spec.length, _order(form), signed=True)  # type: ignore[call-overload]


def _digits(value: object, spec: FieldSpec) -> tuple[bool, str]:
    """Sign and the unscaled digits, left-padded to the field's digit count."""
    number = Decimal(str(value or 0)).scaleb(spec.scale, context=_EXACT)
    if number != number.to_integral_value():
        raise ValueError(f"{value} has more than {spec.scale} decimal places")
    unscaled = int(number)
    digits = str(abs(unscaled)).rjust(spec.digits, "0")
    if len(digits) > spec.digits:
        raise ValueError(f"{value} needs more than {spec.digits} digits")
    return unscaled < 0, digits


def _packed(value: object, spec: FieldSpec, form: Form) -> bytes:
    negative, digits = _digits(value, spec)
    return bytes.fromhex(digits + ("d" if negative else "c"))


def _zoned(value: object, spec: FieldSpec, form: Form) -> bytes:
    negative, digits = _digits(value, spec)
    out = bytearray(form.zone | int(d) for d in digits)
    if negative:
        out[-1] = form.minus_zone | (out[-1] & 0x0F)
    return bytes(out)


def _float(value: object, spec: FieldSpec, form: Form) -> bytes:
    number = float(value or 0.0)  # type: ignore[arg-type]
    if form.floats == "ibm":
        data = float_to_ibm(number, spec.length)
        return data if form.big_endian else data[::-1]
    return struct.pack((">" if form.big_endian else "<") + "fd"[spec.length == 8], number)


def _variable(value: object, spec: FieldSpec, form: Form) -> bytes:
    """A variable-length value: its length (counting the prefix) in ``spec.prefix`` bytes,
    then its bytes: text unpadded, B as given, P/U in as few digits as value and scale need."""
    if spec.format in "AW":
        body = str(value or "").encode(form.text if spec.format == "A" else form.wide)
    elif spec.format == "B":
        number = value if isinstance(value, bytes) else int(value or 0)  # type: ignore[call-overload]
        body = (
            number
            if isinstance(number, bytes)
            else number.to_bytes(max(1, (number.bit_length() + 7) // 8), _order(form))
        )
    else:
        unscaled = Decimal(str(value or 0)).scaleb(spec.scale, context=_EXACT)
        digits = max(len(str(abs(int(unscaled)))), spec.scale, 1)
        if digits > spec.digits:
            raise ValueError(f"{value} needs more than {spec.digits} digits")
        length = digits // 2 + 1 if spec.format == "P" else digits
        body = ENCODERS[spec.format](value, replace(spec, length=length, prefix=1), form)
    total = len(body) + spec.prefix
    if total >= 1 << (8 * spec.prefix):
        raise ValueError(f"{len(body)} bytes do not fit a {spec.prefix}-byte length prefix")
    return total.to_bytes(spec.prefix, _order(form)) + body


#: Adabas format -> encoder of one value.
ENCODERS: dict[str, Encoder] = {
    "A": _alpha,
    "W": _wide,
    "B": _binary,
    "F": _fixed,
    "P": _packed,
    "U": _zoned,
    "G": _float,
}


class PayloadEncoder:
    """Encode value dicts (by column) of one layout in one form."""

    def __init__(self, layout: RecordLayout, form: Form) -> None:
        self.layout = layout
        self.form = form

    def encode(self, values: Mapping[str, object]) -> bytes:
        counts = self._counts(values)
        out = bytearray()
        for item in self.layout.items:
            if isinstance(item, Filler):
                out += self.form.blank * item.length  # A blanks are one byte in every page
            elif isinstance(item, GroupSpec):
                for i, row in enumerate(_occurrences(item, values)):
                    for m in item.members:
                        label = f"{item.name}[{i + 1}].{m.name}"
                        out += self._one(m, dict(row).get(m.column), label, out)  # type: ignore[call-overload]
            elif item.repeated:
                for i, value in enumerate(_occurrences(item, values)):
                    out += self._one(item, value, f"{item.name}[{i + 1}]", out)
            else:
                value = values.get(item.column, counts.get(item.name))
                out += self._one(item, value, item.name, out)
        return bytes(out)

    def _counts(self, values: Mapping[str, object]) -> dict[str, int]:
        """Count fields not given explicitly are the length of the list they count."""
        return {
            i.count_field: len(values.get(i.column) or [])  # type: ignore[arg-type]
            for i in self.layout.items
            if not isinstance(i, Filler) and i.count_field is not None
        }

    def _one(self, spec: FieldSpec, value: object, label: str, out: bytearray) -> bytes:
        try:
            if spec.variable:
                return _variable(value, spec, self.form)
            return ENCODERS[spec.format](value, spec, self.form)
        except (ValueError, TypeError, ArithmeticError, UnicodeError) as exc:
            raise PayloadError(label, len(out), str(exc)) from None


def _occurrences(item: FieldSpec | GroupSpec, values: Mapping[str, object]) -> list[object]:
    given = list(values.get(item.column) or [])  # type: ignore[call-overload]
    if item.occurrences is None:
        return given
    if len(given) > item.occurrences:
        raise PayloadError(item.name, 0, f"{len(given)} values for {item.occurrences} occurrences")
    filler: object = {} if isinstance(item, GroupSpec) else None
    return given + [filler] * (item.occurrences - len(given))


def encode_payload(values: Mapping[str, object], layout: RecordLayout, **form_args: Any) -> bytes:
    """One image of ``layout`` holding ``values`` (by column); ``form_args`` are those of
    :func:`.arch.payload_form` (codepage, ebcdic, acode, wcode, arc, big_endian)."""
    return PayloadEncoder(layout, payload_form(**form_args)).encode(values)
