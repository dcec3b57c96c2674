"""``requests`` rows → the request messages the replicator's input queue receives.

One place for the job's sink and the in-memory test harness: a TRAN row is one message, a
STAT row one message, and the INST rows of one request (same ``idempotency_key``, one row
per file) are ONE message with a URBI per file — R14 wants a URBI for every file of a
multi-file initial-state definition, all naming the same definition and token. A file
without ISNs to refresh gets ``EMPTY_ISN_SELECTION`` (a range that selects nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.urb import requests as urb_requests


@dataclass(frozen=True, slots=True)
class RequestForm:
    """How requests are written and whom the replies go to (conf ``replicator``)."""

    reply_destination: str
    request_token: str
    ebcdic: bool = True
    big_endian: bool = True
    codepage: str = "cp037"


@dataclass(frozen=True, slots=True)
class Outbound:
    """One request message: its Kafka key, kind, bytes (None when the codec refused the
    request: ``error`` says why) and the rows it came from."""

    key: str
    kind: str
    value: bytes | None
    rows: tuple[Mapping[str, Any], ...]
    error: str | None = None


def request_messages(rows: Iterable[Mapping[str, Any]], form: RequestForm) -> list[Outbound]:
    """The messages for a batch's ``requests`` rows, in row order (INST grouped)."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["idempotency_key"], []).append(row)
    out = []
    for key, group in grouped.items():
        kind = group[0].get("kind") or "TRAN"
        try:
            value, error = _encode(kind, group, form), None
        except ValueError as exc:  # reported by the caller; the job never stops for it
            value, error = None, str(exc)
        out.append(Outbound(key, kind, value, tuple(group), error))
    return out


def _encode(kind: str, rows: list[Mapping[str, Any]], form: RequestForm) -> bytes:
    first = rows[0]
    rnam = first.get("reply_destination") or form.reply_destination
    rtok = first.get("token") or form.request_token
    style = {"ebcdic": form.ebcdic, "big_endian": form.big_endian}
    if kind == "INST":
        files = [urb_requests.FileSelection(
            int(r["dbid"]), int(r["fnr"]),
            isns=[int(i) for i in r["isns"]] or urb_requests.EMPTY_ISN_SELECTION)
            for r in rows]
        return urb_requests.inst(first["initial_state"], files, rnam=rnam, rtok=rtok,
                                 codepage=form.codepage, **style)
    if kind == "STAT":
        return urb_requests.stat(first["subscription"], first["destination"], rnam=rnam,
                                 rtok=rtok, **style)
    return urb_requests.tran(first["subscription"], first["destination"],
                             int(first["tsnr"]), rnam=rnam, rtok=rtok, **style)
