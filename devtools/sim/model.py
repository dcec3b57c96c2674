"""The replicator's definitions, as the simulator sees them.

These mirror the Event Replicator's own definition objects (ADARPD SUBSCRIPTION, DESTINATION,
RESENDBUFFER, INITIALSTATE parameters) closely enough that the streams it produces look like a
real replicator's: subscriptions name their destinations, database and files, output form,
which images they send (SFBAI/SFBBI) and the record layout their payloads follow.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from devtools.sim.utility import UtilityEvent
from pipeline.config import SubscriptionFile, check_files_once, file_keys

Encoding = Literal["ebcdic", "ascii"]
KafkaKey = Literal["none", "msgid", "subscription"]
Images = Literal["after", "before", "both"]
FieldFormat = Literal["A", "P", "B", "U"]

MAX_NAME = 8


def _check_name(name: str) -> str:
    """Replicator names are at most 8 characters, blank-padded on the wire."""
    if not name or len(name) > MAX_NAME or name != name.strip():
        raise ValueError(f"name {name!r} must be 1..8 characters without blanks around it")
    return name


Name = Annotated[str, AfterValidator(_check_name)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LayoutField(_Frozen):
    """One field of a record layout: Adabas short name, format and byte length.

    A = alphanumeric in the message's code page, P = packed decimal, B = binary (byte order of
    the message), U = unpacked (zoned) decimal.
    """

    name: str
    format: FieldFormat
    length: int = Field(gt=0, le=253)

    @model_validator(mode="after")
    def _binary_fits(self) -> LayoutField:
        if self.format == "B" and self.length > 8:
            raise ValueError(f"binary field {self.name} longer than 8 bytes")
        return self


class _Files(_Frozen):
    """``dbid`` and ``files`` as the job's conf has them (pipeline/config/): plain file
    numbers of ``dbid``, or ``{dbid, fnr}`` pairs of any database (SFILE/SFDBID)."""

    dbid: int = Field(gt=0, le=65535)
    files: tuple[int | SubscriptionFile, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _files_once(self) -> _Files:
        check_files_once(self.file_keys())
        return self

    def file_keys(self) -> tuple[tuple[int, int], ...]:
        """(dbid, fnr) of every file, in the order given."""
        return file_keys(self.dbid, self.files)

    def databases(self) -> tuple[int, ...]:
        """The databases of the files, in the order given, ``dbid`` first when it has one."""
        found = dict.fromkeys(d for d, _ in self.file_keys())
        return tuple(sorted(found, key=lambda d: d != self.dbid))

    def files_of(self, dbid: int) -> tuple[int, ...]:
        return tuple(f for d, f in self.file_keys() if d == dbid)


class Subscription(_Files):
    """A subscription: the unit of tsnr numbering and of message packing. Its files may be
    of several databases (``databases()``); a transaction is of one database (URBTDBID)."""

    name: Name
    destinations: tuple[str, ...] = Field(min_length=1)
    encoding: Encoding = "ebcdic"
    images: Images = "both"
    resend_buffer: str | None = None
    layout: tuple[LayoutField, ...] = Field(min_length=1)

    @property
    def sends_after(self) -> bool:
        return self.images in ("after", "both")

    @property
    def sends_before(self) -> bool:
        return self.images in ("before", "both")


class Destination(_Frozen):
    """An output destination and the Kafka topic standing in for its queue.

    encoding is the form of status messages sent to the destination; when omitted it is the
    form of the first subscription that writes to it.
    """

    name: Name
    topic: str
    encoding: Encoding | None = None


class ResendBufferDef(_Frozen):
    """A circular resend buffer, shared by the subscriptions that name it; size in bytes."""

    name: Name
    size: int = Field(gt=0)


class InitialStateDef(_Files):
    """An INITIALSTATE definition: which database files an INST request may read (files of
    several databases as ``{dbid, fnr}`` pairs, like a subscription's).

    selection 'all' reads every record; 'isnlist' needs an ISN list in the request.
    """

    name: Name
    selection: Literal["all", "isnlist"] = "all"


MAX_CLOCK_OFFSET_MS = 1000


class DatabaseDef(_Frozen):
    """A database as the replicator receives its transactions (seed 001, "About Output
    Message Time Stamps": commit and record times are machine time of the database's own
    system, which need not agree with the replicator's or another database's).

    ``clock_offset_ms``: how far its clock runs ahead of the replicator's (negative: behind),
    at most ±1 s. ``nuclei``: nuclei of an Adabas cluster committing concurrently (URBTNUCI
    1..N; 1 is a plain nucleus, URBTNUCI 0); a transaction reaches the replicator up to
    ``nucleus_lag_ms`` after its commit, so the replicator receives — and numbers — them in
    an order that is not their commit order. Changes of one ISN still commit in the order
    they were made (the record lock serialises them).
    """

    dbid: int = Field(gt=0, le=65535)
    clock_offset_ms: float = Field(0.0, ge=-MAX_CLOCK_OFFSET_MS, le=MAX_CLOCK_OFFSET_MS)
    nuclei: int = Field(1, ge=1, le=32)
    nucleus_lag_ms: int = Field(0, ge=0, le=10_000)

    @property
    def on_own_clock(self) -> bool:
        """Does anything set this database's times apart from the replicator's clock?"""
        return bool(self.clock_offset_ms) or self.nuclei > 1


class TransactionMix(_Frozen):
    """Relative weights of inserts, updates and deletes, and the transaction size range."""

    insert: float = Field(default=0.3, ge=0)
    update: float = Field(default=0.5, ge=0)
    delete: float = Field(default=0.2, ge=0)
    min_records: int = Field(default=1, ge=1)
    max_records: int = Field(default=8, ge=1)

    @model_validator(mode="after")
    def _range(self) -> TransactionMix:
        if self.min_records > self.max_records:
            raise ValueError("min_records > max_records")
        if self.insert + self.update + self.delete <= 0:
            raise ValueError("at least one of insert/update/delete must have weight")
        return self


class SimConfig(_Frozen):
    """Everything the simulated replicator is defined by. See config.py for the YAML keys."""

    replicator_id: int = Field(default=10007, ge=0, le=65535)
    replicator_name: str = "REPTOR"
    max_message_size: int = Field(default=32768, gt=0)
    records_per_file: int = Field(default=100, ge=0)
    c5_rate: float = Field(default=0.0, ge=0, le=1)
    subscription_run: int = Field(default=4, ge=1)
    initial_state_chunk: int = Field(default=10, ge=1)
    start_time: str = "2025-01-01T00:00:00+00:00"
    request_topic: str = "urb.requests"
    mix: TransactionMix = TransactionMix()
    destinations: tuple[Destination, ...] = Field(min_length=1)
    resend_buffers: tuple[ResendBufferDef, ...] = ()
    subscriptions: tuple[Subscription, ...] = Field(min_length=1)
    initial_states: tuple[InitialStateDef, ...] = ()
    utility_events: tuple[UtilityEvent, ...] = ()  # statuses sent before transaction `at`
    gfft_files: tuple[int, ...] = ()  # files whose GFFT goes out at STRT and REST (gfft.py)
    # What the transport between replicator and Kafka does, by default as a real MQ source
    # connector does it (devtools/sim/faults.py): no Kafka key (``msgid``: the MQ message id;
    # ``subscription``: the old convenience), re-produced batches of up to this many messages,
    # stalls of this long.
    kafka_key: KafkaKey = "none"
    redelivery_max_messages: int = Field(default=2000, ge=1)
    stall_ms: int = Field(default=600_000, ge=1)
    # STRT/REST/TERM name no subscription and, by default, no destination either (the
    # consumer knows the destination from the topic); True: URBSDNAM names it.
    lifecycle_names_destination: bool = False
    # The TOD clock is machine time (seed 001): leap seconds, and the offset of local time.
    tod_utc_offset: str = Field(default="+01:00", pattern=r"^[+-](0\d|1[0-4]):[0-5]\d$")
    tod_leap_seconds: int = Field(default=27, ge=0, le=100)
    # Databases whose clocks disagree with the replicator's, or that are clusters (DatabaseDef);
    # one not listed is on the replicator's clock with one nucleus.
    databases: tuple[DatabaseDef, ...] = ()
    # How the replicator answers requests (devtools/sim/answer_faults.py): a successful TRAN's
    # TRSP (response 0) goes to the reply destination at once, its resend reaches the output
    # topics resend_delay_ms later (their connector lags; what follows there waits behind it).
    resend_delay_ms: int = Field(default=0, ge=0)
    # The first inst_lost_answers INST answers lose one message in transport: the first,
    # a middle or the last data message of the answer, or (single) the whole of its first
    # pseudo-transaction that fits in one message; later answers are whole.
    inst_lost_message: Literal["first", "middle", "last", "single"] | None = None
    inst_lost_answers: int = Field(default=1, ge=0)
    # IMAXREQ: with more than this many INST requests in progress (each for inst_busy_ms
    # after it was taken), a request is refused with INST/ERRO 131 subcode 44. 0: no limit.
    inst_max_requests: int = Field(default=0, ge=0)
    inst_busy_ms: int = Field(default=2000, ge=0)

    @model_validator(mode="after")
    def _references(self) -> SimConfig:
        dests = {d.name for d in self.destinations}
        buffers = {b.name for b in self.resend_buffers}
        for sub in self.subscriptions:
            unknown = [d for d in sub.destinations if d not in dests]
            if unknown:
                raise ValueError(f"subscription {sub.name}: unknown destinations {unknown}")
            if sub.resend_buffer is not None and sub.resend_buffer not in buffers:
                raise ValueError(f"subscription {sub.name}: unknown buffer {sub.resend_buffer}")
        names = [s.name for s in self.subscriptions]
        if len(set(names)) != len(names):
            raise ValueError("subscription names must be unique")
        for event in self.utility_events:
            sub = self.subscription(event.subscription)
            if sub is None:
                raise ValueError(f"utility event: unknown subscription {event.subscription}")
            if event.fnr and event.fnr not in sub.files_of(sub.dbid):
                raise ValueError(f"utility event: file {event.fnr} is not one of "
                                 f"{event.subscription}'s files {list(sub.files_of(sub.dbid))}"
                                 f" of database {sub.dbid}")
        dbids = [d.dbid for d in self.databases]
        if len(set(dbids)) != len(dbids):
            raise ValueError("databases: a dbid is defined twice")
        return self

    def database(self, dbid: int) -> DatabaseDef | None:
        """The definition of a database with its own clock or nuclei, None when it has none."""
        return next((d for d in self.databases if d.dbid == dbid), None)

    @property
    def tod_offset_us(self) -> int:
        """Microseconds the STCK stamps run ahead of UTC (leap seconds and offset)."""
        text = self.tod_utc_offset.strip()
        sign = -1 if text.startswith("-") else 1
        hours, minutes = text.lstrip("+-").split(":")
        return (self.tod_leap_seconds + sign * (int(hours) * 3600 + int(minutes) * 60)) \
            * 1_000_000

    def subscription(self, name: str) -> Subscription | None:
        return next((s for s in self.subscriptions if s.name == name), None)

    def destination(self, name: str) -> Destination | None:
        return next((d for d in self.destinations if d.name == name), None)

    def initial_state(self, name: str) -> InitialStateDef | None:
        return next((i for i in self.initial_states if i.name == name), None)

    def resend_buffer(self, name: str) -> ResendBufferDef | None:
        return next((b for b in self.resend_buffers if b.name == name), None)

    def destination_encoding(self, name: str) -> Encoding:
        """The form of status messages on a destination (see Destination.encoding)."""
        dest = self.destination(name)
        if dest is not None and dest.encoding is not None:
            return dest.encoding
        first = next((s for s in self.subscriptions if name in s.destinations), None)
        return first.encoding if first is not None else "ebcdic"

    def with_encoding(self, encoding: Encoding) -> SimConfig:
        """The same definitions with every subscription and destination in one form."""
        subs = tuple(s.model_copy(update={"encoding": encoding}) for s in self.subscriptions)
        dests = tuple(d.model_copy(update={"encoding": encoding}) for d in self.destinations)
        return self.model_copy(update={"subscriptions": subs, "destinations": dests})
