"""A GFFT (URBF + URBGs) in the stream: a record layout version, reported as an event.

The replicator may send a global format field table at any time, inside or outside a
transaction. It describes how the subscription's images of one file are laid out from its
creation time (URBFTIM1) on; it carries no transaction data, so the machine neither keeps it in
state nor lets it touch transaction assembly, the tsnr sequence or gaps. Each URBF becomes one
:class:`LayoutReceived` (a ``layouts`` row), or a :class:`LayoutRejected` (a ``quarantine``
row, source ``gfft``) when ``layout_from_gfft`` cannot make a layout of it. The layout is
checked here, in the pure step, so a bad GFFT is quarantined once with its bytes and the typed
stage only ever reads layouts that build.
"""

from __future__ import annotations

from pipeline.payload import LayoutError, layout_from_gfft, spark_ddl
from pipeline.payload.gfft import gfft_view
from pipeline.reassembly.events import GfftEvent, LayoutReceived, LayoutRejected
from pipeline.reassembly.rows import ElementRow


def gfft_event(row: ElementRow, key: tuple[str, str], epoch: int, now_ms: int) -> GfftEvent:
    """The event of one URBF row (``row.fields``: ``pipeline.payload.gfft.gfft_fields``)."""
    destination, subscription = key
    gfft = dict(row.fields)
    common = {"subscription": subscription, "destination": destination, "epoch": epoch,
              "fields": gfft, "data": row.data, "topic": row.topic, "partition": row.partition,
              "offset": row.offset, "elem_index": row.elem_index, "urbhtime": row.urbhtime,
              "at_ms": now_ms}
    try:
        layout = layout_from_gfft(gfft_view(gfft))
        spark_ddl(layout)  # a layout Spark cannot type (decimal > 38 digits) is no layout
    except (LayoutError, TypeError, ValueError) as exc:  # TypeError: a URBG cut short
        name = f"{row.num('urbfdbid')}/{row.num('urbffnr')} {row.char('urbfgfid')}".strip()
        return LayoutRejected(**common, reason=f"GFFT {name} rejected: {exc}")
    return LayoutReceived(**common, layout=layout)
