"""Utility and lifecycle statuses the simulated replicator can send at a chosen transaction.

A real replicator reports Adabas utility functions (URBS AUTI with a URBSU detail: refresh,
delete, rename or define file, change field length/format, add fields …) and brackets
utilities whose rows never arrive as ordinary transactions (LODS/LODE, UPDS/UPDE, SAVS/SAVE,
RESS/RESE, RPLS/RPLE), plus LOST, DEAC/REAC and REFR. Tests and demos schedule them:

* YAML (``utility_events`` in the simulator config, see config.py) or a pipeline conf plus
  ``SimConfig.model_copy(update={"utility_events": …})``;
* the command line: ``--utility-event AT:STATUS:SUBSCRIPTION[:FNR[:UTILITY[:K=V,…]]]``, e.g.
  ``20:AUTI:COLOR:4:refresh_file``, ``10:LODS:COLOR:4``, ``15:AUTI:EMPLOYEE:11:
  change_field_length:fieldname=AS,newlength=7``, ``12:RPLS:COLOR:::files=4+5``.

The event goes out before transaction number AT (from 0) in the subscription's own form
(EBCDIC/big endian or ASCII/little endian), keyed by the subscription like its transactions.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.urb import make_element
from pipeline.urb.codes import STATUS
from pipeline.urb.layouts import URBSU_DETAIL, UTILITY_NAMES

#: Utility names as the CLI and YAML spell them (``refresh_file``) → URBSUTYP.
UTILITY_TYPES: dict[str, int] = {
    name.lower().replace(" ", "_"): typ for typ, name in UTILITY_NAMES.items()}
#: URBSUTYP of utilities that leave the file empty: the simulator empties its copy too.
EMPTIES_FILE = frozenset({0x48, 0x57})
_FILE_LIST = frozenset({"RPLS", "RPLE"})


class UtilityEvent(BaseModel):
    """One status to send before transaction ``at``; ``utility``/``detail`` for AUTI only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: int = Field(ge=0)
    status: str
    subscription: str
    fnr: int = Field(default=0, ge=0, le=65535)
    utility: int | None = None
    detail: dict[str, str | int] = Field(default_factory=dict)
    rsp: int = Field(default=0, ge=0)
    files: tuple[int, ...] = ()

    @field_validator("utility", mode="before")
    @classmethod
    def _utility_type(cls, value: Any) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text in UTILITY_TYPES:
            return UTILITY_TYPES[text]
        try:
            return int(text, 16) if text.startswith("0x") else int(text)
        except ValueError:
            raise ValueError(f"unknown utility {value!r}; one of {sorted(UTILITY_TYPES)}"
                             ) from None

    @model_validator(mode="after")
    def _consistent(self) -> UtilityEvent:
        if self.status not in STATUS:
            raise ValueError(f"unknown status {self.status!r}")
        if (self.status == "AUTI") != (self.utility is not None):
            raise ValueError("AUTI needs a utility, and only AUTI takes one")
        if self.utility is not None:
            allowed = {n for _o, n, t, _l in URBSU_DETAIL.get(self.utility, ()) if t != "F"}
            unknown = set(self.detail) - allowed
            if unknown:
                raise ValueError(f"utility X'{self.utility:02X}' has no detail {sorted(unknown)}")
        if self.files and self.status not in _FILE_LIST:
            raise ValueError("files are sent with RPLS/RPLE only")
        return self

    def urbs_fields(self, *, dbid: int, time: int, commit: int) -> dict[str, Any]:
        """``make_element("URBS", **…)`` arguments (STCK ``time`` and ``commit``), with the
        URBSU detail (AUTI) or the file list (RPLS/RPLE)."""
        extra: dict[str, Any] = {}
        if self.utility is not None:
            extra["detail"] = make_element("URBSU", urbsutyp=self.utility, **self.detail)
        elif self.status in _FILE_LIST:
            extra["files"] = list(self.files or ((self.fnr,) if self.fnr else ()))
        return {"urbsst": self.status, "urbstime": time, "urbsttim": commit,
                "urbssnam": self.subscription, "urbsdbid": dbid, "urbsfnr": self.fnr,
                "urbsrsp": self.rsp, **extra}


def parse_spec(spec: str) -> UtilityEvent:
    """``AT:STATUS:SUBSCRIPTION[:FNR[:UTILITY[:K=V,…]]]`` (``files=4+5`` for RPLS/RPLE)."""
    parts = spec.split(":")
    if not 3 <= len(parts) <= 6:
        raise ValueError(f"utility event {spec!r}: expected "
                         "AT:STATUS:SUBSCRIPTION[:FNR[:UTILITY[:K=V,…]]]")
    at, status, sub, *rest = parts
    fnr, utility, pairs = [*rest, "", "", ""][:3]
    detail: dict[str, str | int] = {}
    files: tuple[int, ...] = ()
    for pair in filter(None, pairs.split(",")):
        key, _, value = pair.partition("=")
        if key == "files":
            files = tuple(int(f) for f in value.split("+") if f)
        else:
            detail[key] = int(value) if value.lstrip("-").isdigit() else value
    raw = {"at": at, "status": status.upper(), "subscription": sub, "fnr": fnr or 0,
           "utility": utility or None, "detail": detail, "files": files}
    return UtilityEvent.model_validate(raw)
