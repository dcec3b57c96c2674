"""One ISN's verdict: does the lake's row equal what Adabas answered when it was read?

Why the comparison is with the lake *as of the read*, not the lake now: the replicator reads the
record at URBRTIME (the answer's version, ``pipeline.typed.versioning.change_time``), and the job
applies that answer through the version guard as soon as it lands — so after landing the
``current_`` row equals the answer by construction (the repair). What is compared is the row the
lake held before the answer: the ``current_`` row read before the request was sent
(``before``), brought up to the read by every change the job landed since with a version older
than the read (``landed``: a live change committed between our read of the lake and the
replicator's read of Adabas is part of the state Adabas answered from). A change committed
after the read is newer than the answer and says nothing about it (never ``differs``).

The one race left is a change committed before the read that the job has not landed yet (a
gap the replicator is still filling): the caller says whether every change up to the read has
landed (``comparable``: the database's consistency watermark passed the read, or no gap is
open); an answer that is not comparable is ``unanswered`` (``reason`` says why) and asked again
in a later round — never ``differs``.

Verdicts (``VERDICTS``): ``match``; ``differs`` (the fields named); ``missing_in_lake`` (Adabas
has the record, the lake no row or a deleted one); ``extra_in_lake`` (the replicator answered
response 113, ISN not found, and the lake has a live row); ``unanswered``. Everything here is
pure: no Spark, no Kafka, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

VerdictName = Literal["match", "differs", "missing_in_lake", "extra_in_lake", "unanswered"]
VERDICTS: tuple[VerdictName, ...] = ("match", "differs", "missing_in_lake", "extra_in_lake",
                                     "unanswered")
#: Verdicts that are drift: the lake did not equal Adabas at the read.
DRIFT: frozenset[str] = frozenset({"differs", "missing_in_lake", "extra_in_lake"})
#: A change's version, ``pipeline.typed.versioning.Version``: (commit_time, epoch, tsnr, rsnr).
Version = tuple[datetime, int, int, int]


@dataclass(frozen=True)
class LakeState:
    """What the lake says about one ISN at one version: its values, or that it is deleted
    (a ``current_`` row marked deleted, or a landed delete)."""

    version: Version
    deleted: bool = False
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """The replicator's answer for one ISN: the record's values at ``version`` (its read
    time), or ``found=False`` for response 113 (no such ISN at the read)."""

    isn: int
    version: Version
    found: bool = True
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    isn: int
    verdict: VerdictName
    fields: tuple[str, ...] = ()
    lake_version: Version | None = None
    answer_version: Version | None = None
    reason: str = ""

    @property
    def is_drift(self) -> bool:
        return self.verdict in DRIFT


def lake_at(before: LakeState | None, landed: Iterable[LakeState],
            read: Version) -> LakeState | None:
    """The lake's state of the ISN at ``read``: the newest of ``before`` and the landed
    changes whose version is older than the read (None: the lake never had the ISN)."""
    older = [s for s in (before, *landed) if s is not None and s.version < read]
    return max(older, key=lambda s: s.version, default=None)


def differing_fields(lake: Mapping[str, Any], answer: Mapping[str, Any],
                     fields: Sequence[str]) -> tuple[str, ...]:
    """The fields whose values differ (a field neither side has is equal)."""
    return tuple(f for f in fields if lake.get(f) != answer.get(f))


def judge(isn: int, before: LakeState | None, landed: Iterable[LakeState],
          answer: Answer | None, fields: Sequence[str], *, comparable: bool) -> Verdict:
    """The verdict for one ISN (module docstring). ``before`` newer than the read (clocks
    that disagree, or a lake row written by hand with a future time) cannot be judged by
    this answer: ``unanswered``."""
    if answer is None:
        return Verdict(isn, "unanswered", reason="no answer")
    if not comparable:
        return Verdict(isn, "unanswered", answer_version=answer.version,
                       reason="changes before the read have not all landed")
    if before is not None and before.version >= answer.version:
        return Verdict(isn, "unanswered", lake_version=before.version,
                       answer_version=answer.version, reason="lake row newer than the read")
    state = lake_at(before, landed, answer.version)
    at = state.version if state is not None else None
    present = state is not None and not state.deleted
    if not answer.found:
        name: VerdictName = "extra_in_lake" if present else "match"
        return Verdict(isn, name, lake_version=at, answer_version=answer.version)
    if not present:
        return Verdict(isn, "missing_in_lake", lake_version=at, answer_version=answer.version)
    assert state is not None
    diff = differing_fields(state.values, answer.values, fields)
    return Verdict(isn, "differs" if diff else "match", diff, at, answer.version)
