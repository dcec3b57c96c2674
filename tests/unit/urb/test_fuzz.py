"""Fuzz: 100,000 random mutations of the seed messages; only UrbFormatError may escape.

Mutations are chosen to get past the header checks often (URBHLENT is re-synchronised with the
length half of the time, length fields are a favourite target) so the element walk, nested
lengths (URBD/URBS/URBI data, URBF groups) and short-element decoding are exercised, not just
the first check.  A fixed seed keeps failures reproducible; pytest-timeout catches hangs.
Messages that decode are also re-encoded: that must succeed or raise ValueError.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

from pipeline.urb import UrbFormatError, decode_message, encode_message, make_element

from .conftest import SEED_FILES, load

ITERATIONS = 100_000
SEED = 20240609


def _extra_seeds() -> list[bytes]:
    """Seeds with the element kinds the dumps lack: URBC, URBU, URBF/URBG, URBS with data."""
    elements = [
        make_element("URBC", urbcsnam="COLOR", urbctsnr=7, urbcrsnr=2, urbcdsnr=1),
        make_element("URBS", urbsst="C5DA", data=b"user data"),
        make_element("URBS", urbsst="RPLS", files=[1, 2, 3]),
        make_element(
            "URBS",
            urbsst="AUTI",
            detail=make_element("URBSU", urbsutyp=0x41, fieldname="AA", newlength=9),
        ),
        make_element("URBU", urbuname="EXTRACT"),
        make_element("URBF", groups=[{"urbgidx": 1, "urbgfid": "AA"}, {"urbgidx": 2}]),
        make_element("URBI", urbirt="INST", data=struct.pack(">5I", 1, 0xFFFFFFFF, 3, 9, 12)),
    ]
    return [
        encode_message(None, elements, ebcdic=True, big_endian=True),
        encode_message(None, elements, ebcdic=False, big_endian=False),
    ]


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    buf = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        n = len(buf)
        if n == 0:
            break
        if kind < 0.30:  # flip random bytes
            for _ in range(rng.randint(1, 3)):
                buf[rng.randrange(n)] = rng.randrange(256)
        elif kind < 0.55:  # clobber a fullword at a 4-aligned offset (lengths live there)
            off = rng.randrange(0, max(1, n - 3)) & ~3
            value = rng.choice(
                [
                    0,
                    1,
                    7,
                    8,
                    16,
                    31,
                    32,
                    64,
                    96,
                    112,
                    128,
                    0xFFFF,
                    0x7FFFFFFF,
                    0x80000000,
                    0xFFFFFFFF,
                    rng.randrange(1 << 32),
                ]
            )
            buf[off : off + 4] = value.to_bytes(4, rng.choice(["big", "little"]))
        elif kind < 0.70:  # truncate
            del buf[rng.randrange(n) :]
        elif kind < 0.80:  # insert junk
            at = rng.randrange(n + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 40))
        elif kind < 0.90:  # delete a slice
            at = rng.randrange(n)
            del buf[at : at + rng.randint(1, 40)]
        else:  # duplicate a slice (repeated elements)
            at = rng.randrange(n)
            buf[at:at] = buf[at : at + rng.randint(1, 128)]
    if len(buf) >= 16 and rng.random() < 0.5:  # keep URBHLENT consistent half the time
        order = "big" if buf[10:12] == b"\x00\x01" else "little"
        buf[12:16] = len(buf).to_bytes(4, order)
    return bytes(buf)


@pytest.mark.timeout(300)
def test_fuzz_only_urb_format_error_escapes() -> None:
    rng = random.Random(SEED)
    seeds = [load(name) for name in SEED_FILES] + _extra_seeds()
    decoded = errors = reencoded = 0
    started = time.perf_counter()
    for i in range(ITERATIONS):
        raw = _mutate(rng, rng.choice(seeds))
        try:
            msg = decode_message(raw)
        except UrbFormatError as exc:
            errors += 1
            assert isinstance(exc.offset, int) and exc.reason
            continue
        except Exception as exc:  # pragma: no cover - the failure we hunt
            pytest.fail(f"iteration {i}: {type(exc).__name__}: {exc} for {raw.hex()}")
        decoded += 1
        if i % 10 == 0:
            try:
                encode_message(
                    msg.header, msg.elements, ebcdic=msg.ebcdic, big_endian=msg.big_endian
                )
                reencoded += 1
            except ValueError:
                pass
    elapsed = time.perf_counter() - started
    print(
        f"fuzz: {ITERATIONS} mutations in {elapsed:.1f}s, {decoded} decoded, "
        f"{errors} UrbFormatError, {reencoded} re-encoded"
    )
    assert decoded + errors == ITERATIONS
    assert decoded > ITERATIONS // 20  # the mutations must not all die at the header
    assert errors > ITERATIONS // 20
