"""Simulator configuration: a built-in default set, or a YAML file.

YAML keys (all optional except destinations and subscriptions; defaults in brackets):

    replicator_id: 10007          # URBHRPID / URBTRPID
    replicator_name: REPTOR       # URBHNAME
    max_message_size: 32768       # bytes per message, URBH included
    records_per_file: 100         # records each file holds at start (ISNs 1..N)
    c5_rate: 0.0                  # chance of a C5DA user-data status after a transaction
    subscription_run: 4           # up to this many transactions of one subscription in a row
    initial_state_chunk: 10       # records per initial-state pseudo-transaction
    start_time: "2025-01-01T00:00:00+00:00"   # simulated clock start (file output)
    request_topic: urb.requests   # the replicator's input queue
    mix: {insert: 0.3, update: 0.5, delete: 0.2, min_records: 1, max_records: 8}
    destinations:                 # destination name -> Kafka topic (+ optional encoding)
      - {name: OUT1, topic: urb.out1}
      - {name: REPLY, topic: urb.replies}
    resend_buffers:               # name and size in bytes ("2048K", "1M" accepted)
      - {name: RESEND1, size: 2048K}
    subscriptions:
      - name: COLOR
        destinations: [OUT1]
        dbid: 10006               # the primary database: plain file numbers are its files
        files: [4]                # or {dbid: 10007, fnr: 4} pairs: files of other databases
        encoding: ebcdic          # ebcdic (EBCDIC, big endian) | ascii (ASCII, little endian)
        images: both              # after | before | both  (SFBAI / SFBBI)
        resend_buffer: RESEND1    # omit: TRAN answers rsp 131 subcode 34
        layout:                   # payload fields: A alpha, P packed, B binary, U unpacked
          - {name: AA, format: A, length: 16}
    initial_states:
      - {name: ICOLOR, dbid: 10006, files: [4], selection: all}   # all | isnlist
    databases:                    # databases not on the replicator's clock (model.DatabaseDef)
      - {dbid: 10007, clock_offset_ms: -50, nuclei: 2, nucleus_lag_ms: 20}
    # request answers (model.SimConfig; devtools/sim/answer_faults.py)
    resend_delay_ms: 0            # a TRAN's resend reaches the output topic this much later
    inst_lost_message: null       # first | middle | last | single: an INST answer loses one
    inst_lost_answers: 1          # ... in this many answers (the re-asked one is whole)
    inst_max_requests: 0          # IMAXREQ: more INST requests in progress: ERRO 131/44
    inst_busy_ms: 2000            # how long one INST request is in progress
    utility_events:               # statuses sent before transaction `at` (utility.py)
      - {at: 20, status: AUTI, subscription: COLOR, fnr: 4, utility: refresh_file}
      - {at: 30, status: AUTI, subscription: COLOR, fnr: 4, utility: change_field_length,
         detail: {fieldname: AB, newlength: 20}}
      - {at: 40, status: LODS, subscription: COLOR, fnr: 4}
      - {at: 50, status: RPLS, subscription: COLOR, files: [4]}
    gfft_files: [4]               # files whose GFFT goes out after STRT and REST
    # (gfft_files and utility_events name files of each subscription's primary database, dbid)
    # the transport and the machine, by default a real replicator behind an MQ source connector
    kafka_key: none               # none | msgid (MQMD.MsgId as 48 hex chars) | subscription
    lifecycle_names_destination: false   # true: STRT/REST/TERM name it in URBSDNAM
    redelivery_max_messages: 2000 # largest batch a connector redelivery repeats (faults.py)
    stall_ms: 600000              # how long a connector stall holds a continuation message
    tod_utc_offset: "+01:00"      # the TOD clock's offset from UTC (seed 001: machine time)
    tod_leap_seconds: 27          # leap seconds the TOD clock includes
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devtools.config import SimSubscription, rig
from devtools.sim.model import SimConfig

if TYPE_CHECKING:
    from pipeline.config import Settings

_SIZE = re.compile(r"^\s*(\d+)\s*([KkMm]?)\s*$")

_COLOR = [{"name": "AA", "format": "A", "length": 16}, {"name": "AB", "format": "U", "length": 16}]
_EMPLOYEE = [
    {"name": "AA", "format": "A", "length": 8},
    {"name": "AC", "format": "A", "length": 20},
    {"name": "AE", "format": "A", "length": 20},
    {"name": "AH", "format": "P", "length": 4},
    {"name": "AN", "format": "A", "length": 6},
    {"name": "AS", "format": "P", "length": 5},
    {"name": "AT", "format": "B", "length": 4},
    {"name": "AO", "format": "A", "length": 30},
]
_ORDERS = [
    {"name": "OA", "format": "B", "length": 4},
    {"name": "OB", "format": "A", "length": 12},
    {"name": "OC", "format": "P", "length": 6},
    {"name": "OD", "format": "U", "length": 8},
    {"name": "OE", "format": "B", "length": 2},
    {"name": "OF", "format": "A", "length": 40},
]

DEFAULT: dict[str, Any] = {
    "c5_rate": 0.02,
    "destinations": [
        {"name": "OUT1", "topic": "urb.out1"},
        {"name": "OUT2", "topic": "urb.out2"},
        {"name": "REPLY", "topic": "urb.replies"},
    ],
    # Circular: ~100 transactions of COLOR and EMPLOYEE fit, older ones are overwritten.
    "resend_buffers": [{"name": "RESEND1", "size": "64K"}],
    "subscriptions": [
        {
            "name": "COLOR",
            "destinations": ["OUT1"],
            "dbid": 10006,
            "files": [4],
            "images": "both",
            "resend_buffer": "RESEND1",
            "layout": _COLOR,
        },
        {
            "name": "EMPLOYEE",
            "destinations": ["OUT1", "OUT2"],
            "dbid": 10006,
            "files": [9],
            "images": "both",
            "resend_buffer": "RESEND1",
            "layout": _EMPLOYEE,
        },
        {
            "name": "ORDERS",
            "destinations": ["OUT2"],
            "dbid": 12,
            "files": [20, 21],
            "images": "after",
            "layout": _ORDERS,
        },
    ],
    "initial_states": [
        {"name": "ICOLOR", "dbid": 10006, "files": [4], "selection": "all"},
        {"name": "IEMPL", "dbid": 10006, "files": [9], "selection": "isnlist"},
        {"name": "IORDERS", "dbid": 12, "files": [20, 21], "selection": "all"},
    ],
}


_LAYOUTS = {"COLOR": _COLOR, "EMPLOYEE": _EMPLOYEE, "ORDERS": _ORDERS}


def parse_size(value: int | str) -> int:
    """Bytes from 2048, '2048K' or '2M'."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"not a size: {value!r}")
    factor = {"": 1, "K": 1024, "M": 1024 * 1024}[match.group(2).upper()]
    return int(match.group(1)) * factor


def build_config(raw: dict[str, Any]) -> SimConfig:
    """Validate a mapping (from YAML or code) into a SimConfig."""
    raw = dict(raw)
    raw["resend_buffers"] = [
        {**b, "size": parse_size(b["size"])} for b in raw.get("resend_buffers", [])
    ]
    return SimConfig.model_validate(raw)


def default_config() -> SimConfig:
    """The built-in set: COLOR and EMPLOYEE (EBCDIC, resend buffer), ORDERS (no buffer)."""
    return build_config(DEFAULT)


def load_config(path: str | Path) -> SimConfig:
    """Read a YAML file with the keys described in this module's docstring."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return build_config(raw)


def from_settings(settings: Settings) -> SimConfig:
    """The simulator that matches the job's own settings (conf/*.yaml of pipeline.config).

    Destinations and topics come from topics.outputs and the reply destination/topic, the
    request topic from topics.requests, subscriptions from the subscriptions section (payload
    layouts: the built-in one of the same name, else the ORDERS one), one shared resend buffer
    for the subscriptions whose devtools.subscriptions entry keeps resend_buffer on, and one
    initial-state definition per
    subscription that names one, selecting by ISN list (the job asks for the ISNs a resend
    left unverified; conf/README.md, subscriptions.initial_state).
    """
    topics = settings.topics
    if not topics.outputs:
        raise ValueError("the simulator needs topics.outputs (topic: destination), not a pattern")
    reply = settings.replicator.reply_destination
    destinations = [{"name": d, "topic": t} for t, d in topics.outputs.items()]
    destinations.append({"name": reply, "topic": topics.replies})
    generate = rig(settings)
    subs = [_subscription(s, generate.subscription(s.name)) for s in settings.subscriptions]
    states = [
        {"name": s.initial_state, **_files(s), "selection": "isnlist"}
        for s in settings.subscriptions
        if s.initial_state
    ]
    return build_config(
        {
            **{k: v for k, v in DEFAULT.items() if k not in ("subscriptions", "initial_states")},
            "destinations": list({d["name"]: d for d in destinations}.values()),
            "request_topic": topics.requests,
            "subscriptions": subs,
            "initial_states": states,
            "tod_utc_offset": settings.replicator.tod_utc_offset,
            "tod_leap_seconds": settings.replicator.tod_leap_seconds,
        }
    )


def _files(sub: Any) -> dict[str, Any]:
    """A conf subscription's database and files as the simulator takes them."""
    return {"dbid": sub.dbid, "files": [f if isinstance(f, int) else f.model_dump()
                                        for f in sub.files]}


def _subscription(sub: Any, generate: SimSubscription) -> dict[str, Any]:
    """A conf subscription as the simulator takes it; its message form, images and resend
    buffer from the rig's section (``devtools.subscriptions.<name>``)."""
    return {
        "name": sub.name,
        "destinations": sub.destinations,
        **_files(sub),
        "encoding": "ebcdic" if sub.ebcdic else "ascii",
        "images": generate.images,
        "resend_buffer": "RESEND1" if generate.resend_buffer else None,
        "layout": _LAYOUTS.get(sub.name, _ORDERS),
    }


def load_settings_config(path: str | Path) -> SimConfig:
    """from_settings for a pipeline conf file (environment overrides apply as in the job)."""
    from pipeline.config import load_settings

    return from_settings(load_settings(path))
