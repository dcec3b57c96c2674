"""Pause Python's cyclic garbage collector while a worker handles one batch.

Why: a state call builds ~100,000 short-lived objects per 1,000 messages (element rows,
records, images, row dicts). Reference counting frees all of them (they hold no cycles), but
every 700 allocations the cyclic collector runs anyway, and its older generations walk every
live object of the worker (pandas, pyarrow, pyspark modules, the batch's own frames): a
quarter of the state function's time on a batch of the bench mix (decision 0004).

So the collector is off for the length of one call and back on afterwards, where anything
cyclic the call left behind is collected as usual: memory stays bounded by one batch.
Reentrant: a pause inside a pause leaves the collector as the outer one found it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, restored (not forced on) after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
