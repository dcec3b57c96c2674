"""IBM System/360 hexadecimal floating point (Adabas G format on the mainframe).

Layout, high-order byte first: sign bit, 7-bit exponent (power of 16, excess 64), then a 24-bit
(short, 4 bytes) or 56-bit (long, 8 bytes) fraction ``0.f``; value = ±0.f × 16**(exp−64).
Known vectors: 1.0 = X'41100000', −118.625 = X'C276A000', 0.15625 = X'40280000'.

Why by hand: the standard library knows only IEEE 754.  Decoding is exact for short floats;
long floats carry up to 56 significant bits and are rounded to the nearest double.  Every
double inside the IBM range is exactly representable in the long form, so encoding a double
to 8 bytes and back is lossless; the short form rounds to 24 fraction bits.
"""

from __future__ import annotations

import math

_FRACTION_BITS = {4: 24, 8: 56}


def ibm_to_float(data: bytes) -> float:
    """Value of a 4- or 8-byte IBM float given high-order byte first."""
    bits = _FRACTION_BITS[len(data)]
    word = int.from_bytes(data, "big")
    fraction = word & ((1 << bits) - 1)
    exponent = (word >> bits) & 0x7F
    value = math.ldexp(fraction, 4 * (exponent - 64) - bits)
    return -value if word >> (bits + 7) else value


def float_to_ibm(value: float, length: int) -> bytes:
    """Normalised IBM float of ``length`` (4 or 8) bytes, high-order first.

    Rounds half to even in the short form; values too small for the format become zero, too
    large ones (or NaN and infinities, which IBM floats cannot hold) raise ``ValueError``.
    """
    bits = _FRACTION_BITS[length]
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value} has no IBM floating-point form")
    sign = 1 if math.copysign(1.0, value) < 0 else 0
    if value == 0:
        return (sign << (8 * length - 1)).to_bytes(length, "big")
    mantissa, exp2 = math.frexp(abs(value))  # abs = mantissa * 2**exp2, 0.5 <= mantissa < 1
    exp16 = -(-exp2 // 4)  # ceil: the fraction mantissa * 2**(exp2 - 4*exp16) is in [1/16, 1)
    fraction = round(math.ldexp(mantissa, exp2 - 4 * exp16 + bits))
    if fraction >> bits:  # rounding carried into a new hex digit
        fraction >>= 4
        exp16 += 1
    biased = exp16 + 64
    if biased > 127:
        raise ValueError(f"{value} is too large for an IBM float")
    if biased < 0:
        return (sign << (8 * length - 1)).to_bytes(length, "big")
    word = (sign << (bits + 7)) | (biased << bits) | fraction
    return word.to_bytes(length, "big")
