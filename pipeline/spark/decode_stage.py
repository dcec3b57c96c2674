"""Decode stage: Kafka records → one row per URB element, stateless and vectorised (mapInArrow).

Each element's DSECT fields travel in a struct column named after its eye-catcher (``urbt``,
``urbr`` …) whose fields are exactly the codec's layout table (fillers left out), so the schema
is derived from the codec and never drifts from it. Struct columns arrive in pandas as dicts with
Python ints, which keeps 64-bit STCK values exact (nullable int64 columns would become floats).

STCK values are unsigned 64-bit; Spark has no unsigned long, so they travel as the signed
two's-complement int64 and ``unsigned()`` turns them back.

A record the codec rejects becomes one row with ``eye = "!ERR"``, the reason and the raw bytes;
an element the codec skipped (unknown eye-catcher) adds a ``"!WARN"`` row. Both flow to the
quarantine table through the stateful stage, so one query stays exactly-once end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from pipeline.urb import UrbFormatError, decode_message
from pipeline.urb.layouts import ELEMENT_TABLES

ERROR_EYE = "!ERR"
WARNING_EYE = "!WARN"
STRUCT_EYES: tuple[str, ...] = ("URBT", "URBR", "URBD", "URBE", "URBC", "URBS", "URBU")
_ARROW_TYPE = {"C": pa.string(), "U": pa.int64(), "I": pa.int64(), "T": pa.int64(),
               "X": pa.binary()}
_SPARK_TYPE = {"C": "string", "U": "bigint", "I": "bigint", "T": "bigint", "X": "binary"}
_SIGN = 1 << 63
_WRAP = 1 << 64


def _fields(eye: str) -> list[tuple[str, str]]:
    """(name, type code) of an element's DSECT fields, fillers left out."""
    return [(name, typ) for _off, name, typ, _len in ELEMENT_TABLES[eye] if typ != "F"]


def _arrow_struct(eye: str) -> pa.StructType:
    return pa.struct([(name, _ARROW_TYPE[typ]) for name, typ in _fields(eye)])


_COMMON = [("destination", pa.string(), "string"), ("subscription", pa.string(), "string"),
           ("topic", pa.string(), "string"), ("partition", pa.int32(), "int"),
           ("offset", pa.int64(), "bigint"), ("elem_index", pa.int32(), "int"),
           ("urbhmsnr", pa.int64(), "bigint"), ("urbhtime", pa.int64(), "bigint"),
           ("eye", pa.string(), "string")]
_TAIL = [("payload", pa.binary(), "binary"), ("data", pa.binary(), "binary"),
         ("error", pa.string(), "string"), ("raw", pa.binary(), "binary")]

ARROW_SCHEMA = pa.schema(
    [(n, t) for n, t, _ in _COMMON]
    + [(eye.lower(), _arrow_struct(eye)) for eye in STRUCT_EYES]
    + [(n, t) for n, t, _ in _TAIL])


def spark_ddl() -> str:
    """The element-row schema as a Spark DDL string (for mapInArrow)."""
    parts = [f"`{n}` {s}" for n, _, s in _COMMON]
    for eye in STRUCT_EYES:
        inner = ", ".join(f"`{n}`: {_SPARK_TYPE[t]}" for n, t in _fields(eye))
        parts.append(f"`{eye.lower()}` struct<{inner}>")
    parts += [f"`{n}` {s}" for n, _, s in _TAIL]
    return ", ".join(parts)


STCK_FIELDS: Mapping[str, frozenset[str]] = {
    eye: frozenset(n for n, t in _fields(eye) if t == "T") for eye in STRUCT_EYES}
_STRUCT_NAMES = {eye: frozenset(n for n, _ in _fields(eye)) for eye in STRUCT_EYES}


def signed(value: int) -> int:
    """Unsigned 64-bit → the int64 Spark can hold (same bits)."""
    return value - _WRAP if value >= _SIGN else value


def unsigned(value: int) -> int:
    """Inverse of :func:`signed`."""
    return value + _WRAP if value < 0 else value


def _subscription_of(elements: list[Any], kafka_key: bytes | None) -> str:
    """Rule 13: a message carries one subscription; URBT/URBC/URBE name it."""
    for el in elements:
        name = el.fields.get({"URBT": "urbtsnam", "URBC": "urbcsnam",
                              "URBE": "urbesnam"}.get(el.eye, ""), "")
        if name:
            return name
    return (kafka_key or b"").decode("latin-1").strip()


def _struct_value(eye: str, fields: dict[str, Any]) -> dict[str, Any]:
    names = _STRUCT_NAMES[eye]
    stck = STCK_FIELDS[eye]
    return {k: (signed(v) if k in stck and v is not None else v)
            for k, v in fields.items() if k in names}


class RecordDecoder:
    """Turns one Kafka record into element rows (dicts keyed like ARROW_SCHEMA)."""

    def __init__(self, destinations: Mapping[str, str], default_destination: str,
                 codepage: str, home_destinations: Mapping[str, str] | None = None,
                 initial_states: Mapping[str, str] | None = None) -> None:
        self._destinations = dict(destinations)
        self._home = dict(home_destinations or {})
        self._initial_states = dict(initial_states or {})  # URBSINAM -> subscription
        self._default = default_destination
        self._codepage = codepage

    def rows(self, topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None) -> list[dict[str, Any]]:
        destination = self._destinations.get(topic, self._default)
        # Never null: a nullable int64 column would reach pandas as float64 and round STCKs.
        base = {"destination": destination, "topic": topic, "partition": partition,
                "offset": offset, "urbhmsnr": 0, "urbhtime": 0}
        try:
            msg = decode_message(value or b"", codepage=self._codepage)
        except UrbFormatError as exc:
            sub = (key or b"").decode("latin-1").strip()
            return [{**base, "subscription": sub, "elem_index": -1, "eye": ERROR_EYE,
                     "error": str(exc), "raw": value}]
        head = msg.header
        base["urbhmsnr"] = head.urbhmsnr
        base["urbhtime"] = signed(head.urbhtime or 0)
        sub = _subscription_of(msg.elements, key)
        out = [self._element_row(base, sub, i, el) for i, el in enumerate(msg.elements)]
        out += [{**base, "subscription": sub, "elem_index": -1, "eye": WARNING_EYE,
                 "error": w, "raw": value} for w in msg.warnings]
        return out

    def _element_row(self, base: dict[str, Any], sub: str, index: int, el: Any) -> dict[str, Any]:
        row = {**base, "subscription": sub, "elem_index": index, "eye": el.eye}
        if el.eye == "URBS":
            # Replies (TRSP, SUBS …) arrive at the reply destination but belong to the
            # subscription/destination they name (a TRSP may leave URBSDNAM blank: then the
            # subscription's only destination from conf); destination-wide status keeps its key.
            # INST replies name no subscription: the one whose conf names their initial state.
            snam = el.urbssnam or ""
            if not snam and el.urbsrt == "INST":
                snam = self._initial_states.get(el.urbsinam or "", "")
            row["destination"] = el.urbsdnam or self._home.get(snam) or base["destination"]
            row["subscription"] = snam
            row["data"] = el.data or None
        elif el.eye == "URBD":
            row["payload"] = el.payload
        if el.eye in _STRUCT_NAMES:
            row[el.eye.lower()] = _struct_value(el.eye, el.fields)
        return row


def arrow_decoder(decoder: RecordDecoder) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    """The mapInArrow function over Kafka batches (topic, partition, offset, key, value)."""

    def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            cols = batch.to_pydict()
            rows: list[dict[str, Any]] = []
            for topic, part, off, key, value in zip(cols["topic"], cols["partition"],
                                                    cols["offset"], cols["key"], cols["value"],
                                                    strict=True):
                rows.extend(decoder.rows(topic, part, off, key, value))
            yield pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA)

    return decode_batches
