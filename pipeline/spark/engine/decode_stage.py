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

Why not one row per element with the DSECT fields as columns: a 32 KB message holds ~40
elements, and every element row would cross Arrow → JVM rows → shuffle → Arrow → pandas dicts
with seven struct columns of ~140 fields; that plumbing costs several times what decoding the
message twice costs (decision 0001). One row per message shuffles the bytes Kafka delivered
and nothing more.

A record whose structure the scan rejects becomes one row with ``error`` set (the full
decoder's error) for the destination-wide key; the state stage quarantines it with its
bytes, as it does a record that only the full decode rejects. Elements the codec skipped
(unknown eye-catcher) come back as warnings from ``element_rows`` and are quarantined there
too, so one query stays exactly-once end to end.

The Kafka key routes nothing: a default MQ source connector writes none, or the MQ message
id. Keys come from the message alone, and from conf where the message is silent:
- a status that names no subscription (STRT, REST, TERM …) belongs to its destination's key
  (destination, ""); STRT/REST also reach every configured subscription of the destination
  as *echo* rows (they restart numbering there; only the destination key lands them);
- a GFFT in a message of its own names no subscription: it goes to every configured
  subscription of the destination whose database and files cover its (dbid, fnr);
- per Arrow batch and topic, the destination key gets the runs of consecutive URBHMSNR
  (``part`` -1: message continuity) and every configured subscription of the destination a
  *tick* with the newest URBHTIME read there (``part`` -2: evidence that the replicator moved
  on, for partial-transaction timeouts and gap verdicts);
- a record of the control topic (``urbpipe gaps resume``) is a JSON command for the key it
  names (``part`` -3).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from pipeline.arrow_bytes import Spans, binary_spans
from pipeline.payload.gfft import gfft_fields
from pipeline.reassembly.routing import SNAM_FIELD, Covered, Key, Router
from pipeline.reassembly.rows import (
    CONTROL_PART,
    HEADERS_PART,
    RUN_FORMAT,
    TICK_FORMAT,
    TICK_PART,
    ElementRow,
    pseudo_rows,
)
from pipeline.spark.engine.gcpause import gc_paused
from pipeline.urb import UrbFormatError, decode_message
from pipeline.urb.native import NativeRouter, Walked, load_router
from pipeline.urb.scan import (
    ScannedElement,
    scan_element,
    scan_header,
    scan_headers,
    scan_message,
)

ERROR_EYE = "!ERR"
WARNING_EYE = "!WARN"
#: Elements whose DSECT fields reach the state machine (the others carry no state).
STRUCT_EYES: tuple[str, ...] = ("URBT", "URBR", "URBD", "URBE", "URBC", "URBS", "URBU")
#: GFFTs route by their own fields when no element names a subscription: the compiled scan
#: defers messages with one to the Python scan. Statuses route by their own fields too: it
#: locates them, and they are scanned here.
_SELF_ROUTED, _STATUSES = ("URBF",), ("URBS",)


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




class RecordDecoder:
    """Works out the keys of a Kafka record's elements, and its element rows for one key.

    ``lanes`` gives each configured key its state lane (``pipeline.spark.engine.lanes``; others 0);
    ``destinations`` maps source topics to destination names; ``home_destinations`` gives a
    subscription's only destination (a TRSP may leave URBSDNAM blank); ``initial_states`` maps
    an initial-state name to the one subscription whose conf names it (INST replies carry no
    subscription name); ``covered`` lists each destination's configured subscriptions (fan-out
    of STRT/REST, GFFTs without a subscription, ticks); ``control_topic`` carries operator
    commands. ``native_scan`` routes plain messages with the compiled scan where it is built
    (``pipeline.urb.native``; the same keys as the Python scan, tested); False: Python only.
    """

    def __init__(self, destinations: Mapping[str, str], default_destination: str,
                 codepage: str, home_destinations: Mapping[str, str] | None = None,
                 initial_states: Mapping[str, str] | None = None,
                 lanes: Mapping[Key, int] | None = None,
                 inst_routes: Mapping[tuple[str, str], Key] | None = None,
                 covered: Mapping[str, Sequence[Covered]] | None = None,
                 control_topic: str | None = None, native_scan: bool = True) -> None:
        self._destinations = dict(destinations)
        self._lanes = dict(lanes or {})
        self._router = Router({d: tuple(c) for d, c in (covered or {}).items()},
                              dict(home_destinations or {}), dict(initial_states or {}),
                              dict(inst_routes or {}))
        self._control = control_topic
        self._default = default_destination
        self._codepage = codepage
        self._native: NativeRouter | None = (
            load_router(codepage, SNAM_FIELD, _SELF_ROUTED, _STATUSES) if native_scan else None)

    @property
    def native_scan(self) -> bool:
        """Whether plain messages are routed by the compiled scan (else Python alone)."""
        return self._native is not None

    @property
    def codepage(self) -> str:
        """The code page of EBCDIC messages' character fields (the fast path reads them)."""
        return self._codepage

    def destination(self, topic: str) -> str:
        return self._destinations.get(topic, self._default)

    def rows(self, topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None) -> list[dict[str, Any]]:
        """The decode stage's rows of one record: one per distinct key, in element order."""
        base = {"topic": topic, "partition": partition, "offset": offset, "key": key,
                "value": value}
        return [{**base, **dict(zip(ROUTE_COLUMNS, route, strict=True))}
                for route in self.routes(topic, key, value)]

    def routes(self, topic: str, key: bytes | None, value: bytes | None) -> list[Route]:
        """(lane, destination, subscription, part, error) of each row of one record."""
        if topic == self._control:
            return [self._control_route(value)]
        destination = self.destination(topic)
        walked = self._native.walk(value) if self._native is not None and value else None
        if walked is not None:
            return self._walked_routes(destination, value or b"", walked)
        try:  # routing needs the name fields only: the state stage decodes in full
            elements = scan_message(value or b"", codepage=self._codepage)
        except UrbFormatError as exc:
            return [(self._lane((destination, "")), destination, "", 0, str(exc))]
        return self._keyed(destination, elements)

    def routes_many(self, topics: Sequence[str], keys: pa.Array, values: pa.Array,
                    messages: Spans) -> tuple[list[int], list[Route]]:
        """:meth:`routes` of every record of an Arrow batch, in order: the index of the
        record of each route, and the routes. ``messages``: the values' bytes
        (``arrow_bytes.binary_spans``). The compiled scan walks the whole batch in one call
        per form; the records it does not answer (statuses, the control topic, what it defers)
        go through :meth:`routes` one by one."""
        plain = (self._native.walk_many(*messages) if self._native is not None
                 else [None] * len(topics))
        index: list[int] = []
        routes: list[Route] = []
        known: dict[tuple[str, str], Route] = {}
        for i, (topic, subscription) in enumerate(zip(topics, plain, strict=True)):
            if subscription is None or topic == self._control:
                found = self.routes(topic, keys[i].as_py(), values[i].as_py())
                index += [i] * len(found)
                routes += found
                continue
            key = (self.destination(topic), subscription)
            route = known.get(key)
            if route is None:
                route = known[key] = (self._lane(key), *key, 0, None)
            index.append(i)
            routes.append(route)
        return index, routes

    def _walked_routes(self, destination: str, value: bytes, walked: Walked) -> list[Route]:
        """The routes of a message the compiled scan walked: its data elements' key, and the
        statuses' keys (those few scanned here), in the order the Python scan finds them."""
        if not walked.statuses:  # the common case: every element goes to one key
            key = (destination, walked.subscription)
            return [(self._lane(key), *key, 0, None)]
        elements = [scan_element(value, off, ln, codepage=self._codepage)
                    for off, ln in walked.statuses]
        if walked.data_at >= 0:  # the data elements all take the key of the name they carry
            elements.insert(walked.data_at,
                            ScannedElement("URBT", {"urbtsnam": walked.subscription}))
        return self._keyed(destination, elements)

    def _keyed(self, destination: str, elements: list[Any]) -> list[Route]:
        """One route per distinct key of the elements, in the order the keys first appear."""
        keys = self._router.keys(destination, elements)
        return [(self._lane(k), *k, i, None) for i, k in enumerate(keys)]

    def _lane(self, key: Key) -> int:
        return self._lanes.get(key, 0)

    def _control_route(self, value: bytes | None) -> Route:
        """An operator command: JSON naming the destination and subscription it is for."""
        try:
            doc = json.loads(value or b"")
            key = (str(doc["destination"]), str(doc["subscription"]))
        except (ValueError, KeyError, TypeError) as exc:
            return (0, "", "", CONTROL_PART, f"control record is not a command: {exc}")
        return (self._lane(key), *key, CONTROL_PART, None)

    def element_rows(self, topic: str, partition: int, offset: int, key: bytes | None,
                     value: bytes, wanted: Key, part: int) -> tuple[list[ElementRow], list[str]]:
        """The elements of one record that go to ``wanted`` (echoes marked), and the codec's
        warnings (reported once per record: with its first key, ``part`` 0)."""
        if part < 0:
            return pseudo_rows(topic, partition, offset, value, part), []
        msg = decode_message(value, codepage=self._codepage)
        destination = self.destination(topic)
        home = wanted[0] == destination
        msnr, htime = msg.header.urbhmsnr, msg.header.urbhtime or 0
        out = []
        for index, (el, targets) in enumerate(
                zip(msg.elements, self._router.targets(destination, msg.elements), strict=True)):
            echo = next((e for k, e in targets if k == wanted), None)
            if echo is None:
                continue
            # the decoder's field dict as it is: its builders emit exactly the DSECT fields,
            # fillers left out (a URBS lands in status_events.fields_json from it)
            eye, fields, data = el.eye, el.fields if el.eye in STRUCT_EYES else {}, None
            if eye == "URBS":
                data = el.data or None
            elif eye == "URBF":  # a GFFT: its URBGs as data, its bytes for the layouts table
                fields, data = gfft_fields(el), value[el.offset:el.offset + (el.urbflen or 0)]
            out.append(ElementRow(topic, partition, offset, index, msnr, htime, eye, fields,
                                  el.payload if eye == "URBD" else None, data, msg.big_endian,
                                  echo, home))
        return out, (list(msg.warnings) if part == 0 else [])

    def batch_rows(self, records: Sequence[tuple[str, int, int, bytes | None]]
                   ) -> list[dict[str, Any]]:
        """The rows an Arrow batch of records adds besides their own (see the module
        docstring): URBHMSNR runs for the destination keys, ticks for the subscriptions'.
        ``records`` are (topic, partition, offset, value) in Kafka order."""
        return self.header_rows((topic, partition, offset, *scan_header(value or b""))
                                for topic, partition, offset, value in records)

    def header_rows(self, headers: Iterable[tuple[str, int, int, int, int]]
                    ) -> list[dict[str, Any]]:
        """:meth:`batch_rows` from each record's (topic, partition, offset, URBHMSNR,
        URBHTIME), as ``scan.scan_header`` reads them (0, 0: not a replicator message)."""
        out: list[dict[str, Any]] = []
        for (topic, partition), heads in _headers(headers, self._control).items():
            destination = self.destination(topic)
            for first_offset, first, last, htime in _runs(heads):
                out.append(self._pseudo((destination, ""), topic, partition, first_offset,
                                        HEADERS_PART, RUN_FORMAT.pack(first, last, htime)))
            newest = TICK_FORMAT.pack(max(h for _, _, h in heads))
            for c in self._router.covered.get(destination, ()):
                out.append(self._pseudo((destination, c.subscription), topic, partition,
                                        heads[-1][0], TICK_PART, newest))
        return out

    def _pseudo(self, key: Key, topic: str, partition: int, offset: int, part: int,
                value: bytes) -> dict[str, Any]:
        return {"lane": self._lane(key), "destination": key[0], "subscription": key[1],
                "topic": topic, "partition": partition, "offset": offset, "part": part,
                "key": None, "value": value, "error": None}


def _headers(headers: Iterable[tuple[str, int, int, int, int]], control: str | None
             ) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """(offset, URBHMSNR, URBHTIME) of every replicator message, per topic partition."""
    out: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for topic, partition, offset, msnr, htime in headers:
        if topic == control:
            continue
        if htime or msnr:
            out.setdefault((topic, partition), []).append((offset, msnr, htime))
    return out


def _runs(heads: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Consecutive URBHMSNR as (first offset, first, last, newest URBHTIME) runs."""
    runs: list[list[int]] = []
    for offset, msnr, htime in heads:
        if runs and msnr == runs[-1][2] + 1:
            run = runs[-1]
            run[2], run[3] = msnr, max(run[3], htime)
        else:
            runs.append([offset, msnr, msnr, htime])
    return [(a, b, c, d) for a, b, c, d in runs]


def route_batch(decoder: RecordDecoder, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """The decode stage's rows of a batch of Kafka records: each record's columns (taken,
    not copied through Python, once per key it has) and its route; then the batch's own
    rows (message-number runs, ticks: ``RecordDecoder.header_rows``)."""
    topics = batch.column("topic").to_pylist()
    values = batch.column("value")
    messages = binary_spans(values)
    index, routes = decoder.routes_many(topics, batch.column("key"), values, messages)
    msnr, htime = scan_headers(*messages)
    extra = decoder.header_rows(zip(topics, batch.column("partition").to_pylist(),
                                    batch.column("offset").to_pylist(), msnr.tolist(),
                                    htime.tolist(), strict=True))
    return stage_rows(batch, index, routes, extra)


def stage_rows(batch: pa.RecordBatch, index: list[int], routes: list[Route],
               extra: list[dict[str, Any]]) -> list[pa.RecordBatch]:
    """The stage's output: the records' columns taken at ``index`` (once per route) beside
    their ``routes``, then the batch's own rows (``extra``)."""
    taken = batch.select(list(KAFKA_COLUMNS)).take(pa.array(index, pa.int64()))
    by_name = {name: taken.column(name) for name in KAFKA_COLUMNS}
    for name, column in zip(ROUTE_COLUMNS, zip(*routes, strict=True) if routes
                            else [()] * len(ROUTE_COLUMNS), strict=True):
        by_name[name] = pa.array(column, ARROW_SCHEMA.field(name).type)
    out = [pa.RecordBatch.from_arrays([by_name[n] for n in ARROW_SCHEMA.names],
                                      schema=ARROW_SCHEMA)]
    if extra:
        out.append(pa.RecordBatch.from_pylist(extra, schema=ARROW_SCHEMA))
    return out


def arrow_decoder(decoder: RecordDecoder) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    """The mapInArrow function over Kafka batches (topic, partition, offset, key, value)."""

    def decode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            with gc_paused():  # pipeline/spark/engine/gcpause.py
                out = route_batch(decoder, batch)
            yield from out

    return decode_batches
