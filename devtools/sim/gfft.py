"""The GFFT (URBF + URBGs) a simulated subscription sends for one of its files.

Built from the same layout its payloads follow (``devtools.sim.payloads``), so a job that
takes its layouts from the stream decodes the simulator's images without a format buffer.
Long names are the short names (``AA``): a job maps them to column names with its conf's
``columns`` (or gets ``aa``). The replicator sends it after STRT and after REST
(``Replicator.gffts``), in a message of its own. Nothing in it names a subscription: a GFFT
describes a file (URBFDBID/URBFFNR; URBFFNAM is the file's name, here ``FILE-dbid-fnr``), and
only the ``--key subscription`` convenience puts the subscription's name on its Kafka record
(a consumer routes it by the file).
"""

from __future__ import annotations

from devtools.sim.elements import Part
from devtools.sim.model import Subscription
from pipeline.payload import RecordLayout, parse_format_buffer
from pipeline.payload.gfft import gfft_from_layout
from pipeline.urb import make_element

GFID = "SIMGFB"


def sim_layout(sub: Subscription) -> RecordLayout:
    """The subscription's payload layout as a RecordLayout (columns: short names)."""
    return parse_format_buffer(",".join(f"{f.name},{f.length},{f.format}" for f in sub.layout))


def file_name(dbid: int, fnr: int) -> str:
    """URBFFNAM: the file's name, which says nothing about the subscriptions replicating it."""
    return f"FILE-{dbid}-{fnr}"


def gfft_part(sub: Subscription, fnr: int, created: int) -> Part:
    """The URBF element of ``fnr`` created at the STCK ``created``."""
    fields = {"urbfdbid": sub.dbid, "urbffnr": fnr, "urbfgfid": GFID, "urbftim1": created,
              "urbffnam": file_name(sub.dbid, fnr), "groups": gfft_from_layout(sim_layout(sub))}
    return Part("URBF", fields, int(make_element("URBF", **fields).urbflen))
