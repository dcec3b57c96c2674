"""What the replicator sends and how the job addresses it: ``topics``, ``replicator`` and
``subscriptions`` (each with its files, of one database or several)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from pipeline.config.base import DNAM, Model
from pipeline.reassembly.config import MAX_INST_DESTINATIONS


class Topics(Model):
    """Topic names, and which replicator destination each output topic carries.

    The URBT does not carry the destination name, so the job learns it from this mapping.
    """

    outputs: dict[str, str] = Field(default_factory=lambda: {"urb.out1": "OUT1"})
    output_pattern: str | None = None
    pattern_destination: str | None = None
    requests: str = "urb.requests"
    replies: str = "urb.replies"
    alerts: str = "urb.alerts"
    control: str = "urb.control"  # operator commands to the job (urbpipe gaps resume)

    @field_validator("outputs")
    @classmethod
    def _destinations_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        for topic, dnam in value.items():
            if not DNAM.match(dnam):
                raise ValueError(f"destination {dnam!r} of topic {topic!r} is not a 1-8 "
                                 "character replicator name")
        return value

    @model_validator(mode="after")
    def _source_defined(self) -> Topics:
        if not self.outputs and not self.output_pattern:
            raise ValueError("give outputs (topic: destination) or output_pattern")
        if self.output_pattern and not self.pattern_destination:
            raise ValueError("output_pattern needs pattern_destination")
        return self

    def all_created(self) -> list[str]:
        """Topics the local broker creates: outputs, replies, requests, alerts, control."""
        names = [*self.outputs, self.replies, self.requests, self.alerts, self.control]
        return list(dict.fromkeys(names))


class Replicator(Model):
    """How the job addresses the Event Replicator Server through its input queue."""

    reply_destination: str = "REPLY"
    request_token: str = "URBPIPE"
    ebcdic: bool = True
    big_endian: bool = True
    codepage: Literal["cp037", "cp500", "cp273", "cp1140", "cp1047"] = "cp037"
    # The replicator's STCK times are "machine time" (seed 001, "About Output Message Time
    # Stamps"): the TOD clock may include leap seconds and may be set to local time. Every
    # time column, metric and evidence comparison subtracts both (pipeline/urb/stck.py).
    tod_leap_seconds: int = Field(0, ge=0, le=100)
    tod_utc_offset: str = "+00:00"

    @field_validator("tod_utc_offset")
    @classmethod
    def _utc_offset(cls, value: str) -> str:
        if not re.match(r"^[+-](0\d|1[0-4]):[0-5]\d$", value.strip()):
            raise ValueError("must look like '+01:00' or '-05:00' (the TOD clock's offset "
                             "from UTC)")
        return value.strip()

    @property
    def tod_offset_us(self) -> int:
        """Microseconds to subtract from a STCK time to get UTC: leap seconds and offset."""
        sign = -1 if self.tod_utc_offset.startswith("-") else 1
        hours, minutes = self.tod_utc_offset[1:].split(":")
        offset_s = sign * (int(hours) * 3600 + int(minutes) * 60)
        return (self.tod_leap_seconds + offset_s) * 1_000_000

    @field_validator("reply_destination")
    @classmethod
    def _dnam(cls, value: str) -> str:
        if not DNAM.match(value):
            raise ValueError("must be a 1-8 character replicator destination name")
        return value

    @field_validator("request_token")
    @classmethod
    def _token(cls, value: str) -> str:
        if not 1 <= len(value) <= 8:
            raise ValueError("must be 1-8 characters (URBIRTOK is 8 bytes)")
        return value


#: The database of a subscription that names none (``dbid``) and lists plain file numbers.
DEFAULT_DBID = 10006


class SubscriptionFile(Model):
    """One file of a subscription with its database (``SFILE=4,SFDBID=10006`` in seed 000's
    ADARPD SUBSCRIPTION): a subscription may list files of several databases."""

    dbid: int = Field(ge=1, le=65535)
    fnr: int = Field(ge=1, le=65535)


def _pair(item: Any) -> tuple[int, int] | None:
    """(dbid, fnr) of a well-formed ``{dbid, fnr}`` entry of a files list, else None."""
    if isinstance(item, SubscriptionFile):
        return item.dbid, item.fnr
    if isinstance(item, dict) and set(item) == {"dbid", "fnr"} and all(
            isinstance(v, int) and not isinstance(v, bool) for v in item.values()):
        return item["dbid"], item["fnr"]
    return None


def file_keys(dbid: int, files: Sequence[int | SubscriptionFile]) -> tuple[tuple[int, int], ...]:
    """(dbid, fnr) of each entry of a ``files`` list: a plain number is a file of ``dbid``
    (also the simulator's definitions, devtools/sim/model.py)."""
    return tuple((f.dbid, f.fnr) if isinstance(f, SubscriptionFile) else (dbid, f)
                 for f in files)


def check_files_once(keys: Sequence[tuple[int, int]]) -> None:
    """ValueError naming the first (dbid, fnr) a files list names twice."""
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"files lists database {twice[0][0]} file {twice[0][1]} twice")


class Subscription(Model):
    """A replicator subscription the job expects (how the simulator generates it: ``devtools``).

    ``files`` lists file numbers of ``dbid`` (the old form, ``[4, 9]``), ``{dbid, fnr}``
    pairs (``[{dbid: 10006, fnr: 4}, {dbid: 10007, fnr: 4}]``), or both. The primary
    database is ``dbid`` when given, else the first the pairs name (``DEFAULT_DBID`` with
    plain numbers only); ``file_keys()`` is the (dbid, fnr) list every reader uses.
    """

    name: str
    destinations: list[str] = Field(default_factory=lambda: ["OUT1"])
    dbid: int = Field(DEFAULT_DBID, ge=1, le=65535)
    files: list[int | SubscriptionFile] = Field(default_factory=lambda: [4], min_length=1)
    # The text form of its images where URBTACOD names no code page (the typed tables decode
    # them so); the simulator sends the subscription in this form.
    ebcdic: bool = True
    initial_state: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _primary_database(cls, data: Any) -> Any:
        """Without ``dbid`` the primary database is the first the pairs name; plain numbers
        beside pairs need ``dbid`` (which database they are of would be a guess). Pairs of
        the primary database are kept as plain numbers: ``files`` then reads as it always
        did for the files of ``dbid``, and ``file_keys()`` is the same either way."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            return data
        files = data["files"]
        pairs = [_pair(f) for f in files]
        dbid = data.get("dbid")
        if dbid is None:
            named = [p for p in pairs if p is not None]
            if not named:
                return data
            if any(isinstance(f, int) and not isinstance(f, bool) for f in files):
                raise ValueError("files mixes plain file numbers with {dbid, fnr} pairs: give "
                                 "dbid, the database of the plain numbers")
            dbid = named[0][0]
        kept = [p[1] if p is not None and p[0] == dbid else f for f, p in zip(files, pairs,
                                                                               strict=True)]
        return {**data, "dbid": dbid, "files": kept}

    @field_validator("name")
    @classmethod
    def _snam(cls, value: str) -> str:
        if not DNAM.match(value):
            raise ValueError("must be a 1-8 character subscription name")
        return value

    @field_validator("files", mode="before")
    @classmethod
    def _file_forms(cls, value: Any) -> Any:
        """One clear line for an entry that is neither form (pydantic would report both)."""
        if not isinstance(value, list):
            return value
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int | dict | SubscriptionFile):
                raise ValueError(f"entry {i} ({item!r}) is neither a file number nor "
                                 "{dbid: N, fnr: N}")
            if isinstance(item, dict) and (set(item) != {"dbid", "fnr"} or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in item.values())):
                raise ValueError(f"entry {i} ({item!r}) must be {{dbid: N, fnr: N}}: "
                                 "two numbers")
        return value

    @model_validator(mode="after")
    def _files_once(self) -> Subscription:
        check_files_once(self.file_keys())
        return self

    def file_keys(self) -> tuple[tuple[int, int], ...]:
        """(dbid, fnr) of every file of the subscription, in conf order: plain numbers are
        files of ``dbid``."""
        return file_keys(self.dbid, self.files)

    def databases(self) -> tuple[int, ...]:
        """The databases the subscription's files are in, in conf order, the primary
        (``dbid``) first when it has files."""
        found = dict.fromkeys(d for d, _ in self.file_keys())
        return tuple(sorted(found, key=lambda d: d != self.dbid))

    def files_of(self, dbid: int) -> tuple[int, ...]:
        """The file numbers of database ``dbid`` the subscription lists."""
        return tuple(f for d, f in self.file_keys() if d == dbid)

    @field_validator("initial_state")
    @classmethod
    def _inam(cls, value: str | None) -> str | None:
        if value is not None and not DNAM.match(value):
            raise ValueError("must be a 1-8 character initial-state definition name (URBIINAM)")
        return value

    @model_validator(mode="after")
    def _inst_tokens(self) -> Subscription:
        # The job's INST tokens name the asking destination in one character (reassembly
        # config.InitialStateTarget.token_for).
        if self.initial_state and len(self.destinations) > MAX_INST_DESTINATIONS:
            raise ValueError(f"with initial_state, at most {MAX_INST_DESTINATIONS} destinations")
        return self
