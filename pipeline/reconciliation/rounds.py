"""A reconciliation round's plan and its outcome per file: which ISNs, in which requests, and
what the round lets an auditor sign (``verified_through``). Pure: the caller gives the ISNs the
lake knows and a random source.

Which ISNs: ``--isns`` (a list with ranges, expanded: every ISN of a range is asked by name,
so each gets an answer, the record or response 113); ``--full`` (every ISN the lake knows of
the file: its ``current_`` rows, its tombstones and every ISN its ``changes_`` ever held — a
row deleted from ``current_`` by hand is still asked for); else a random sample of
``reconcile.sample`` of the ISNs the lake knows.

What a round proves: a file's ``verified_through`` is the time up to which every ISN of the
file was compared and found equal, or repaired: only a full cycle with no ISN unanswered and no
drift left unrepaired proves it, and the time is the earliest read of the cycle (each ISN was
equal at its own read, so the whole file at the earliest of them at worst). A cycle is one full
round, or — with a cap on the ISNs a full round asks for (``reconcile.full_round_isns``) —
successive full rounds, each taking the next ISNs after the previous one's last (``Part``,
``next_part``), until one reaches the last ISN the lake knows (``cycle_verified``).
"""

from __future__ import annotations

import random
import string
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Part:
    """One full round's share of a file's cycle (a row of ``verified_through``)."""

    cycle: str                  # the token of the cycle's first round
    last_isn: int               # the highest ISN the round asked for
    done: bool                  # the round reached the last ISN the lake knew
    equal: bool                 # every ISN matched, or its drift was repaired
    first_read: datetime | None  # the earliest read of the round's answers


def next_part(known: Iterable[int], previous: Part | None, cap: int | None,
              token: str) -> tuple[list[int], str, bool]:
    """A full round's ISNs: every one the lake knows (``cap`` None), else the next ``cap``
    after the previous part of an unfinished cycle (a new cycle from the first ISN otherwise);
    with the cycle's id and whether this round completes it."""
    isns = sorted(set(known))
    if cap is None:
        return isns, token, True
    cursor, cycle = ((previous.last_isn, previous.cycle)
                     if previous is not None and not previous.done else (0, token))
    rest = [i for i in isns if i > cursor]
    return rest[:cap], cycle, len(rest) <= cap


def part_of(verdicts: Sequence[Verdict], repaired: set[int], cycle: str,
            done: bool) -> Part:
    """What one full round contributes to its cycle."""
    equal = bool(verdicts) and not any(
        v.verdict == "unanswered" or (v.is_drift and v.isn not in repaired) for v in verdicts)
    reads = [v.answer_version[0] for v in verdicts if v.answer_version is not None]
    return Part(cycle, max((v.isn for v in verdicts), default=0), done, equal,
                min(reads) if reads else None)


def cycle_verified(parts: Sequence[Part]) -> datetime | None:
    """A completed cycle whose every part was equal proves the file through its earliest
    read; anything else proves nothing."""
    if not parts or not parts[-1].done or not all(p.equal for p in parts):
        return None
    reads = [p.first_read for p in parts]
    return None if any(r is None for r in reads) else min(r for r in reads if r is not None)


def tally(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """ISNs per verdict."""
    return dict(Counter(v.verdict for v in verdicts))


def in_words(counts: dict[str, int]) -> str:
    """``{"match": 214, "differs": 3}`` → ``"3 differs, 214 match"``."""
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def drift_ratio(verdicts: Sequence[Verdict]) -> float:
    """Drifted ISNs over ISNs judged (unanswered ones are not judged)."""
    judged = [v for v in verdicts if v.verdict != "unanswered"]
    return sum(v.is_drift for v in judged) / len(judged) if judged else 0.0
