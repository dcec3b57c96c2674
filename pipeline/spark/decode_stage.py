"""Decode stage: Kafka records → one row per (message, key), stateless (mapInArrow).

The stateful stage is keyed by (destination, subscription), and only the message tells its
key: the subscription is named in its URBT/URBC/URBE, a reply's URBS names the subscription
and destination it belongs to. So this stage scans every message for those names
(``pipeline.urb.scan``: the element chain and the name fields, checked like the full decoder
checks them, at a fifth of its cost), works out the key of each element, and emits one narrow
row per distinct key of the message: the Kafka coordinates, the key and the message bytes.
The state function decodes the message in full (:meth:`RecordDecoder.element_rows`, which
works out the keys with the same rules from the decoded fields) and keeps the elements of its
key.

Why not one row per element with the DSECT fields as columns (the first design): a 32 KB
message holds ~40 elements, and every element row crossed Arrow → JVM rows → shuffle → Arrow
→ pandas dicts with seven struct columns of ~140 fields; that plumbing cost several times what
decoding the message twice costs (BENCHMARKS.md, "Pipeline throughput"). One row per message
shuffles the bytes Kafka delivered and nothing more.

A record whose structure the scan rejects becomes one row with ``error`` set (the full
decoder's error) and the Kafka key's subscription; the state stage quarantines it with its
bytes, as it does a record that only the full decode rejects. Elements the codec skipped
(unknown eye-catcher) come back as warnings from ``element_rows`` and are quarantined there
too, so one query stays exactly-once end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from pipeline.payload.gfft import gfft_fields
from pipeline.reassembly.rows import ElementRow
from pipeline.spark.gcpause import gc_paused
from pipeline.urb import UrbFormatError, decode_message
from pipeline.urb.scan import scan_message

ERROR_EYE = "!ERR"
WARNING_EYE = "!WARN"
#: Elements whose DSECT fields reach the state machine (the others carry no state).
STRUCT_EYES: tuple[str, ...] = ("URBT", "URBR", "URBD", "URBE", "URBC", "URBS", "URBU")
_SNAM_FIELD = {"URBT": "urbtsnam", "URBC": "urbcsnam", "URBE": "urbesnam"}

Key = tuple[str, str]  # (destination, subscription)

_COLUMNS = [("lane", pa.int32(), "int"), ("destination", pa.string(), "string"),
            ("subscription", pa.string(), "string"),
            ("topic", pa.string(), "string"), ("partition", pa.int32(), "int"),
            ("offset", pa.int64(), "bigint"), ("part", pa.int32(), "int"),
            ("key", pa.binary(), "binary"), ("value", pa.binary(), "binary"),
            ("error", pa.string(), "string")]
ARROW_SCHEMA = pa.schema([(n, t) for n, t, _ in _COLUMNS])
#: The Kafka source's columns the rows carry on, and the ones routing adds.
KAFKA_COLUMNS = ("topic", "partition", "offset", "key", "value")
ROUTE_COLUMNS = ("lane", "destination", "subscription", "part", "error")
Route = tuple[int, str, str, int, str | None]


def spark_ddl() -> str:
    """The message-row schema as a Spark DDL string (for mapInArrow)."""
    return ", ".join(f"`{n}` {s}" for n, _, s in _COLUMNS)




def _subscription_of(elements: list[Any], kafka_key: bytes | None) -> str:
    """Rule 13: a message carries one subscription; URBT/URBC/URBE name it."""
    for el in elements:
        name = el.fields.get(_SNAM_FIELD.get(el.eye, ""), "")
        if name:
            return name
    return (kafka_key or b"").decode("latin-1").strip()


class RecordDecoder:
    """Works out the keys of a Kafka record's elements, and its element rows for one key.

    ``lanes`` gives each configured key its state lane (``pipeline.spark.lanes``; others 0);
    ``destinations`` maps source topics to destination names; ``home_destinations`` gives a
    subscription's only destination (a TRSP may leave URBSDNAM blank); ``initial_states`` maps
    an initial-state name to the one subscription whose conf names it (INST replies carry no
    subscription name).
    """

    def __init__(self, destinations: Mapping[str, str], default_destination: str,
                 codepage: str, home_destinations: Mapping[str, str] | None = None,
                 initial_states: Mapping[str, str] | None = None,
                 lanes: Mapping[Key, int] | None = None,
                 inst_routes: Mapping[tuple[str, str], Key] | None = None) -> None:
        self._destinations = dict(destinations)
        self._inst_routes = dict(inst_routes or {})  # (definition, token) -> the asking key
        self._lanes = dict(lanes or {})
        self._home = dict(home_destinations or {})
        self._initial_states = dict(initial_states or {})  # URBSINAM -> subscription
        self._default = default_destination
        self._codepage = codepage

    def rows(self, topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None) -> list[dict[str, Any]]:
        """The decode stage's rows of one record: one per distinct key, in element order."""
        base = {"topic": topic, "partition": partition, "offset": offset, "key": key,
                "value": value}
        return [{**base, **dict(zip(ROUTE_COLUMNS, route, strict=True))}
                for route in self.routes(topic, key, value)]

    def routes(self, topic: str, key: bytes | None, value: bytes | None) -> list[Route]:
        """(lane, destination, subscription, part, error) of each row of one record."""
        destination = self._destinations.get(topic, self._default)
        try:  # routing needs the name fields only: the state stage decodes in full
            elements = scan_message(value or b"", codepage=self._codepage)
        except UrbFormatError as exc:
            sub = (key or b"").decode("latin-1").strip()
            return [(self._lanes.get((destination, sub), 0), destination, sub, 0, str(exc))]
        keys = list(dict.fromkeys(self._keys(destination, elements, key)))
        if not keys:  # a header without elements still belongs somewhere (warnings, if any)
            keys = [(destination, _subscription_of(elements, key))]
        return [(self._lanes.get((d, s), 0), d, s, i, None) for i, (d, s) in enumerate(keys)]

    def element_rows(self, topic: str, partition: int, offset: int, key: bytes | None,
                     value: bytes, wanted: Key, part: int) -> tuple[list[ElementRow], list[str]]:
        """The elements of one record that belong to ``wanted``, and the codec's warnings
        (reported once per record: with its first key, ``part`` 0)."""
        msg = decode_message(value, codepage=self._codepage)
        destination = self._destinations.get(topic, self._default)
        msnr, htime = msg.header.urbhmsnr, msg.header.urbhtime or 0
        out = []
        for index, (el, el_key) in enumerate(
                zip(msg.elements, self._keys(destination, msg.elements, key), strict=True)):
            if el_key != wanted:
                continue
            # the decoder's field dict as it is: its builders emit exactly the DSECT fields,
            # fillers left out (a URBS lands in status_events.fields_json from it)
            eye, fields, data = el.eye, el.fields if el.eye in STRUCT_EYES else {}, None
            if eye == "URBS":
                data = el.data or None
            elif eye == "URBF":  # a GFFT: its URBGs as data, its bytes for the layouts table
                fields, data = gfft_fields(el), value[el.offset:el.offset + (el.urbflen or 0)]
            out.append(ElementRow(topic, partition, offset, index, msnr, htime, eye, fields,
                                  el.payload if eye == "URBD" else None, data, msg.big_endian))
        return out, (list(msg.warnings) if part == 0 else [])

    def _keys(self, destination: str, elements: list[Any], kafka_key: bytes | None
              ) -> list[Key]:
        """The key of every element, in order."""
        sub = _subscription_of(elements, kafka_key)
        return [self._status_key(destination, el) if el.eye == "URBS" else (destination, sub)
                for el in elements]

    def _status_key(self, destination: str, el: Any) -> Key:
        # Replies (TRSP, SUBS …) arrive at the reply destination but belong to the
        # subscription/destination they name (a TRSP may leave URBSDNAM blank: then the
        # subscription's only destination from conf); destination-wide status keeps its key.
        # INST replies name no subscription: the one whose conf names their initial state.
        # ``el`` is a decoded Element or a scanned one (pipeline.urb.scan): fields by name.
        fields = el.fields
        snam = fields.get("urbssnam") or ""
        if not snam and fields.get("urbsrt") == "INST":
            asked = self._inst_routes.get((fields.get("urbsinam") or "",
                                           fields.get("urbsrtok") or ""))
            if asked is not None:  # one of the job's requests: the key that sent it
                return asked
            snam = self._initial_states.get(fields.get("urbsinam") or "", "")
        return (fields.get("urbsdnam") or self._home.get(snam) or destination, snam)


def route_batch(decoder: RecordDecoder, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The decode stage's rows of a batch of Kafka records: each record's columns (taken,
    not copied through Python, once per key it has) and its route."""
    topics = batch.column("topic").to_pylist()
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    index: list[int] = []
    routes: list[Route] = []
    for i, (topic, key, value) in enumerate(zip(topics, keys, values, strict=True)):
        found = decoder.routes(topic, key, value)
        index += [i] * len(found)
        routes += found
    taken = batch.select(list(KAFKA_COLUMNS)).take(pa.array(index, pa.int64()))
    by_name = {name: taken.column(name) for name in KAFKA_COLUMNS}
    for name, column in zip(ROUTE_COLUMNS, zip(*routes, strict=True) if routes
                            else [()] * len(ROUTE_COLUMNS), strict=True):
        by_name[name] = pa.array(column, ARROW_SCHEMA.field(name).type)
    return pa.RecordBatch.from_arrays([by_name[n] for n in ARROW_SCHEMA.names],
                                      schema=ARROW_SCHEMA)


def arrow_decoder(decoder: RecordDecoder) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    """The mapInArrow function over Kafka batches (topic, partition, offset, key, value)."""

    def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            with gc_paused():  # pipeline/spark/gcpause.py
                out = route_batch(decoder, batch)
            yield out

    return decode_batches
