"""The simulator's images (devtools/sim/payloads.py) decode to the values it meant to write.

The simulator writes A (blank padded), P (sign C/D), B (unsigned, message byte order) and U
(zone F/D in EBCDIC, 3/7 in ASCII) back to back; its layouts become format buffers here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from decimal import Decimal

import pytest

from devtools.sim import Replicator, default_config
from devtools.sim.config import DEFAULT, build_config
from devtools.sim.model import LayoutField
from devtools.sim.payloads import decode_record, encode_record, random_record
from pipeline.payload import RecordLayout, decode_payload, parse_format_buffer
from pipeline.urb import decode_message

FORMS = {"ebcdic": {"ebcdic": True, "arc": 0, "acode": 37}, "ascii": {"ebcdic": False, "arc": 9}}


def _layout(fields: Sequence[LayoutField]) -> RecordLayout:
    fb = ",".join(f"{f.name},{f.length},{f.format}" for f in fields) + "."
    return parse_format_buffer(fb)


def _intended(values: dict[str, object]) -> dict[str, object]:
    """The simulator's values as the codec types them (numbers of P/U are Decimals)."""
    return {k.lower(): Decimal(v) if isinstance(v, int) else v for k, v in values.items()}


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_random_records_of_every_builtin_layout(encoding: str) -> None:
    rng = random.Random(6)
    for sub in default_config().subscriptions:
        layout = _layout(sub.layout)
        for _ in range(200):
            values = random_record(sub.layout, rng)
            image = encode_record(sub.layout, values, encoding)  # type: ignore[arg-type]
            decoded = decode_payload(image, layout, **FORMS[encoding])
            assert decoded == _intended(values)
            assert decoded == _intended(decode_record(sub.layout, image, encoding))  # type: ignore[arg-type]


def _config(encoding: str):  # type: ignore[no-untyped-def]
    raw = dict(DEFAULT)
    raw["subscriptions"] = [{**s, "encoding": encoding} for s in DEFAULT["subscriptions"]]
    return build_config(raw)


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_images_in_simulated_messages(encoding: str) -> None:
    """Every URBD the simulator sends decodes with the form its URBT announces."""
    config = _config(encoding)
    layouts = {s.name: (s, _layout(s.layout)) for s in config.subscriptions}
    forms: dict[str, dict[str, object]] = {}
    images = 0
    for delivery in Replicator(config, 11).run(60):
        msg = decode_message(delivery.value)
        for el in msg.elements:
            if el.eye == "URBT":
                forms[el.urbtsnam] = {"arc": el.urbtarc, "acode": el.urbtacod, "wcode": 0}
                sub_name = el.urbtsnam
            elif el.eye == "URBC":
                sub_name = el.urbcsnam
            elif el.eye == "URBD":
                sub, layout = layouts[sub_name]
                form = {"ebcdic": msg.ebcdic, "big_endian": msg.big_endian, **forms[sub_name]}
                decoded = decode_payload(el.payload, layout, **form)  # type: ignore[arg-type]
                expected = decode_record(sub.layout, el.payload, encoding)  # type: ignore[arg-type]
                assert decoded == _intended(expected)
                images += 1
    assert images > 100
    assert forms and all(f["arc"] == (0 if encoding == "ebcdic" else 9) for f in forms.values())
