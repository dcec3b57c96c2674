"""What every section of the conf shares: the frozen model, interval and size parsing, the
replicator's name rule."""

from __future__ import annotations

import re

from pydantic import (
    BaseModel,
    ConfigDict,
)

ENV_PREFIX = "URBPIPE__"
DNAM = re.compile(r"^[A-Za-z0-9@#$_.-]{1,8}$")
INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|minutes?|min)$")
_INTERVAL_UNIT_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "second": 1000,
                     "seconds": 1000, "min": 60_000, "minute": 60_000, "minutes": 60_000}


def interval_ms(text: str) -> float:
    """A trigger interval as conf accepts it (``'5 seconds'``, ``'500 ms'``, ``'1 minute'``)
    in milliseconds."""
    match = INTERVAL.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not an interval like '5 seconds', '500 ms', '1 minute'")
    return float(match[1]) * _INTERVAL_UNIT_MS[match[2]]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: The roles a secured local broker's SCRAM user can have; each is a set of ACLs derived from
#: ``topics`` (devtools/broker_security.py, ``acl_plan``; the table in conf/README.md).


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes of ``128MB``, ``512 KB``, ``1GB`` or a bare number (binary units, as Delta's
    ``optimize.maxFileSize`` counts)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size like 128MB, 512KB, 1GB")
    return int(match[1]) * _SIZE_UNITS[(match[2] or "b").lower()]
