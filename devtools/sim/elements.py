"""URB elements for transactions and status messages, as parts the packer can measure.

A Part is an element not yet encoded: its eye-catcher, its DSECT fields, its payload or data,
and its size on the wire. The packer needs sizes before it decides where a message ends, and
sets continuation flags afterwards, so elements stay editable until the message is encoded
with the codec (pipeline.urb) in one go.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from devtools.sim.clock import stck
from devtools.sim.model import Subscription
from devtools.sim.transactions import RecordChange, Transaction
from pipeline.urb import Element, make_element

YES = "Y"
BLANK = " "
# The form a subscription's payloads are converted to (SARC/SACODE/SWCODE of the seeds).
_ASCII_FORM = {"urbtarc": 9, "urbtacod": 819, "urbtwcod": 4091}
_EBCDIC_FORM = {"urbtarc": 0, "urbtacod": 37, "urbtwcod": 4091}


@dataclass
class Part:
    """One element to be encoded: fields by DSECT name, plus URBD payload or URBS data."""

    eye: str
    fields: dict[str, Any]
    size: int
    payload: bytes | None = None
    data: bytes | None = None

    def element(self) -> Element:
        extra: dict[str, bytes] = {}
        if self.payload is not None:
            extra["payload"] = self.payload
        if self.data is not None:
            extra["data"] = self.data
        return make_element(self.eye, **self.fields, **extra)


@cache
def element_size(eye: str, extra: int = 0) -> int:
    """Bytes an element takes on the wire, with `extra` bytes of payload or data."""
    kwargs: dict[str, bytes] = {}
    if eye == "URBD":
        kwargs["payload"] = bytes(extra)
    elif eye == "URBS" and extra:
        kwargs["data"] = bytes(extra)
    element = make_element(eye, **kwargs)
    return int(getattr(element, f"{eye.lower()}len"))


def header_size() -> int:
    return element_size("URBH")


@dataclass(frozen=True)
class TxFlags:
    """How a transaction is being sent: normally, again (RSND), resent (PTRN), initial state."""

    rsnd: bool = False
    ptrn: bool = False
    initial: bool = False
    token: str = ""


def transaction_parts(
    tx: Transaction, tsnr: int, sub: Subscription, rpid: int, flags: TxFlags = TxFlags()
) -> list[Part]:
    """URBT, then each URBR followed by its URBDs, then URBE (rules 2-7 of the seed)."""
    parts = [_urbt(tx, tsnr, sub, rpid, flags)]
    for rsnr, record in enumerate(tx.records, start=1):
        parts.extend(_record_parts(record, rsnr, flags))
    parts.append(Part("URBE", {"urbesnam": sub.name, "urbetsnr": tsnr}, element_size("URBE")))
    return parts


def _urbt(tx: Transaction, tsnr: int, sub: Subscription, rpid: int, flags: TxFlags) -> Part:
    fields: dict[str, Any] = {
        "urbtsnam": sub.name,
        "urbttsnr": tsnr,
        "urbtrcnt": len(tx.records),
        "urbtttim": stck(tx.commit),
        "urbtptim": stck(tx.processed),
        "urbtdbid": tx.dbid,
        "urbtnuci": tx.nucleus,
        "urbtguid": tx.guid,
        "urbtrpid": rpid,
        "urbtrsnd": YES if flags.rsnd else BLANK,
        "urbtinst": YES if flags.initial else BLANK,
        "urbtrtok": flags.token,
        "urbtcont": BLANK,
        "urbtptrn": YES if flags.ptrn else BLANK,
        "urbtorig": "A",
        **(_ASCII_FORM if sub.encoding == "ascii" else _EBCDIC_FORM),
    }
    return Part("URBT", fields, element_size("URBT"))


def _record_parts(record: RecordChange, rsnr: int, flags: TxFlags) -> list[Part]:
    images = [(t, img) for t, img in (("B", record.before), ("A", record.after)) if img]
    urbr = {
        "urbrrsnr": rsnr,
        "urbrdcnt": len(images),
        "urbrfnr": record.fnr,
        "urbrisn": record.isn,
        "urbrtime": stck(record.time),
        "urbrtyp": record.kind,
        "urbrrsnd": YES if flags.rsnd else BLANK,
        "urbrrsp": record.rsp,
    }
    parts = [Part("URBR", urbr, element_size("URBR"))]
    for dsnr, (typ, image) in enumerate(images, start=1):
        fields = {"urbddsnr": dsnr, "urbdtyp": typ}
        parts.append(Part("URBD", fields, element_size("URBD", len(image)), payload=image))
    return parts


def continuation_part(subscription: str, tsnr: int, rsnr: int, dsnr: int) -> Part:
    """The URBC that opens a continuation message: where the transaction stopped."""
    fields = {
        "urbcsnam": subscription,
        "urbctsnr": tsnr,
        "urbcrsnr": rsnr,
        "urbcdsnr": dsnr,
        "urbccont": BLANK,
    }
    return Part("URBC", fields, element_size("URBC"))


def status_part(rt: str, st: str, time: int, data: bytes = b"", **fields: Any) -> Part:
    """A URBS status element; `fields` by DSECT name (urbssnam, urbsrsp, ...)."""
    all_fields = {"urbsrt": rt, "urbsst": st, "urbstime": stck(time), **fields}
    size = element_size("URBS", len(data))
    return Part("URBS", all_fields, size, data=data or None)
