"""Input rows of the state machine: one decoded URB element with its Kafka coordinates.

The decode stage (pipeline/spark) turns every Kafka record into one row per element; this
module is the only place that knows how such a row looks, so the rest of the machine reads
fields through the small accessors below instead of poking at raw dicts.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from itertools import groupby
from types import MappingProxyType
from typing import NamedTuple

_NO_FIELDS: Mapping[str, object] = MappingProxyType({})

#: Rows the decode stage adds that are no replicator element (``eye`` starts with "!"):
#: HEADERS_EYE — runs of URBHMSNR of a destination's messages (``first``, ``last``,
#: ``htime``), for the destination-wide key's message continuity; TICK_EYE — the newest
#: URBHTIME on the destination's topic (``htime``), evidence that the replicator moved on;
#: CONTROL_EYE — an operator command from the control topic (``command``, ``by``, ``note``).
HEADERS_EYE = "!HDR"
TICK_EYE = "!TICK"
CONTROL_EYE = "!CTL"
#: ``elem_index`` of such rows: after every element of the message they sit at.
PSEUDO_INDEX = 1 << 30
#: The decode stage's ``part`` of such a row (a message's own rows have ``part`` >= 0), and
#: how its value is packed.
HEADERS_PART, TICK_PART, CONTROL_PART = -1, -2, -3
RUN_FORMAT = struct.Struct(">IIQ")   # first URBHMSNR, last URBHMSNR, newest URBHTIME of a run
TICK_FORMAT = struct.Struct(">Q")    # newest URBHTIME on the topic


class ElementRow(NamedTuple):
    """One URB element (URBT, URBR, URBD, URBE, URBC, URBS …) of one Kafka message.

    ``fields`` holds the element's DSECT fields by lowercase name (``urbttsnr`` …): character
    fields as stripped ``str``, binary fields as ``int``, STCK times as raw ``int``; it may be
    the decoder's own dict (never changed here), so extra names such as fillers can occur.
    ``elem_index`` is the element's position in its message, header excluded, from 0.

    A NamedTuple (immutable, built in C) because the state stage makes one per element:
    ~40 per replicator message, so construction cost shows in the throughput.
    """

    topic: str
    partition: int
    offset: int
    elem_index: int
    urbhmsnr: int
    urbhtime: int
    eye: str
    fields: Mapping[str, object] = _NO_FIELDS
    payload: bytes | None = None
    data: bytes | None = None
    big_endian: bool | None = None  # the message's byte order (URBHBORD), kept for URBS data
    # A copy of an element whose key is another one (a destination-wide STRT/REST fanned out
    # to every subscription of the destination): it may change this key's state, never land.
    echo: bool = False
    # The message came on the topic of this key's destination (False: e.g. a copy of a reply
    # on the reply destination's topic, which is not ordered with the key's data).
    home: bool = True

    @classmethod
    def from_mapping(cls, d: Mapping[str, object]) -> ElementRow:
        """Build a row from a dict (e.g. a pandas row); tolerant of NaN/None and JSON fields."""
        raw_fields = d.get("fields")
        if isinstance(raw_fields, str | bytes):
            raw_fields = json.loads(raw_fields)
        if raw_fields is not None and not isinstance(raw_fields, Mapping):
            raw_fields = dict(raw_fields)  # e.g. a list of (key, value) pairs from a Spark map
        return cls(
            topic=str(d.get("topic") or ""),
            partition=_int(d.get("partition")),
            offset=_int(d.get("offset")),
            elem_index=_int(d.get("elem_index")),
            urbhmsnr=_int(d.get("urbhmsnr")),
            urbhtime=_int(d.get("urbhtime")),
            eye=str(d.get("eye") or "").strip(),
            fields=dict(raw_fields or {}),
            payload=_bytes(d.get("payload")),
            data=_bytes(d.get("data")),
        )

    def char(self, name: str) -> str:
        """A character field, stripped; '' when absent (a short, older DSECT)."""
        value = self.fields.get(name)
        if value.__class__ is str:  # the decoder's own rows: the common case, kept cheap
            return value.strip()  # type: ignore[union-attr]
        if value is None or _is_nan(value):
            return ""
        if isinstance(value, bytes | bytearray):
            return bytes(value).decode("latin-1").strip()
        return str(value).strip()

    def num(self, name: str) -> int:
        """A binary field as int; 0 when absent. Single-byte fields may arrive as bytes."""
        value = self.fields.get(name)
        return value if value.__class__ is int else _int(value)  # type: ignore[return-value]

    def flag(self, name: str) -> bool:
        """A one-character indicator field such as URBTRSND: True only for 'Y'."""
        return self.char(name).upper() == "Y"

    @property
    def message_key(self) -> tuple[int, int, str, bool]:
        """Identity of the Kafka message the element came from (pseudo rows apart)."""
        return (self.partition, self.offset, self.topic, self.elem_index >= PSEUDO_INDEX)

    @property
    def sort_key(self) -> tuple[int, int, str, int]:
        """Kafka order: (partition, offset) first; topic only breaks ties between topics."""
        return (self.partition, self.offset, self.topic, self.elem_index)


def messages(rows: Iterable[ElementRow]) -> list[tuple[ElementRow, ...]]:
    """Sort rows into Kafka order and group them per message.

    Spark does not keep row order inside a group, so order is rebuilt here from the Kafka
    coordinates. A message's elements always arrive in the same batch (one Kafka record is
    decoded at once), so a message is never split between two calls of ``step``.
    """
    ordered = sorted(rows, key=lambda r: r.sort_key)
    return [tuple(group) for _, group in groupby(ordered, key=lambda r: r.message_key)]


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _int(value: object) -> int:
    if value is None or _is_nan(value):
        return 0
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    if isinstance(value, str):
        return int(value.strip() or 0)
    return int(value)  # type: ignore[call-overload]


def _bytes(value: object) -> bytes | None:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return None


def pseudo_rows(topic: str, partition: int, offset: int, value: bytes | None,
                part: int) -> list[ElementRow]:
    """The state machine's row for a decode-stage row that is no replicator message
    (``part`` < 0: a message-number run, a tick or an operator command)."""
    data = value or b""
    if part == HEADERS_PART:
        first, last, htime = RUN_FORMAT.unpack(data)
        eye, fields = HEADERS_EYE, {"first": first, "last": last, "htime": htime}
    elif part == TICK_PART:
        eye, fields = TICK_EYE, {"htime": TICK_FORMAT.unpack(data)[0]}
    else:
        doc = json.loads(data)
        eye = CONTROL_EYE
        fields = {k: str(doc.get(k) or "") for k in ("command", "by", "note")}
    return [ElementRow(topic, partition, offset, PSEUDO_INDEX, 0, 0, eye, fields)]
