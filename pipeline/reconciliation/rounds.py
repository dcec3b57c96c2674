"""A reconciliation round's plan and its outcome per file: which ISNs, in which requests, and
what the round lets an auditor sign (``verified_through``). Pure: the caller gives the ISNs the
lake knows and a random source.

Which ISNs: ``--isns`` (a list with ranges, expanded: every ISN of a range is asked by name,
so each gets an answer, the record or response 113); ``--full`` (every ISN the lake knows of
the file: its ``current_`` rows, its tombstones and every ISN its ``changes_`` ever held — a
row deleted from ``current_`` by hand is still asked for); else a random sample of
``reconcile.sample`` of the ISNs the lake knows.

What a round proves: a file's ``verified_through`` is the time up to which every ISN of the
file was compared and found equal, or repaired: only a full round with no ISN unanswered and no
drift left unrepaired proves it, and the time is the earliest read of the round (each ISN was
equal at its own read, so the whole file at the earliest of them at worst).
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

from pipeline.reassembly.pseudo import RECONCILE_TOKEN_PREFIX as TOKEN_PREFIX
from pipeline.reconciliation.verdicts import Verdict

_TOKEN_CHARS = string.ascii_uppercase + string.digits


def round_token(rng: random.Random) -> str:
    """A new round's request token: ``RCN`` and 5 random characters (60 million)."""
    return TOKEN_PREFIX + "".join(rng.choice(_TOKEN_CHARS) for _ in range(5))


def expand(items: Iterable[int | tuple[int, int]], limit: int = 1_000_000) -> list[int]:
    """ISNs and (first, last) ranges → sorted unique ISNs; ``limit`` guards a typo."""
    out: set[int] = set()
    for item in items:
        lo, hi = item if isinstance(item, tuple) else (item, item)
        if lo < 1 or hi < lo:
            raise ValueError(f"ISN range {lo}-{hi}: ISNs start at 1 and a range goes upwards")
        if len(out) + hi - lo + 1 > limit:
            raise ValueError(f"more than {limit:,} ISNs asked for in one round")
        out.update(range(lo, hi + 1))
    return sorted(out)


def choose(known: Iterable[int], *, sample: int | None, rng: random.Random) -> list[int]:
    """The round's ISNs of one file: all it knows (``sample=None``), else a random sample."""
    isns = sorted(set(known))
    if sample is None or sample >= len(isns):
        return isns
    return sorted(rng.sample(isns, sample))


def chunks(isns: Sequence[int], size: int) -> Iterator[list[int]]:
    """The ISN lists of the round's requests, ``size`` ISNs each at most."""
    for start in range(0, len(isns), size):
        yield list(isns[start:start + size])


def verified_through(verdicts: Sequence[Verdict], repaired: set[int], *,
                     full: bool) -> datetime | None:
    """The time a full round proves the file equal up to (module docstring), or None."""
    if not full or not verdicts:
        return None
    for v in verdicts:
        if v.verdict == "unanswered" or (v.is_drift and v.isn not in repaired):
            return None
    reads = [v.answer_version[0] for v in verdicts if v.answer_version is not None]
    return min(reads) if reads else None


def drift_ratio(verdicts: Sequence[Verdict]) -> float:
    """Drifted ISNs over ISNs judged (unanswered ones are not judged)."""
    judged = [v for v in verdicts if v.verdict != "unanswered"]
    return sum(v.is_drift for v in judged) / len(judged) if judged else 0.0
