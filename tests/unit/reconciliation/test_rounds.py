"""A round's plan and what it proves, without Spark or Kafka."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from pipeline.reassembly.pseudo import RECONCILE_TOKEN_PREFIX
from pipeline.reconciliation import rounds
from pipeline.reconciliation.verdicts import Verdict

T0 = datetime(2026, 11, 29, 8)


def verdict(isn: int, name: str, read_s: float | None = 1) -> Verdict:
    read = None if read_s is None else (T0 + timedelta(seconds=read_s), 1, 0, 1)
    return Verdict(isn, name, answer_version=read)  # type: ignore[arg-type]


def test_token_is_eight_characters_with_the_prefix_the_job_knows() -> None:
    token = rounds.round_token(random.Random(1))
    assert len(token) == 8 and token.startswith(RECONCILE_TOKEN_PREFIX)
    assert token != rounds.round_token(random.Random(2))


def test_expand_asks_every_isn_of_a_range_by_name() -> None:
    assert rounds.expand([5, (1, 3), 2]) == [1, 2, 3, 5]
    with pytest.raises(ValueError, match="goes upwards"):
        rounds.expand([(9, 3)])
    with pytest.raises(ValueError, match="more than 10"):
        rounds.expand([(1, 11)], limit=10)


def test_choose_all_or_a_reproducible_sample() -> None:
    known = range(1, 101)
    assert rounds.choose(known, sample=None, rng=random.Random(0)) == list(known)
    a = rounds.choose(known, sample=10, rng=random.Random(7))
    assert len(a) == 10 and a == sorted(a) and set(a) <= set(known)
    assert a == rounds.choose(known, sample=10, rng=random.Random(7))
    assert rounds.choose([3, 1], sample=10, rng=random.Random(0)) == [1, 3]


def test_chunks_respect_the_requests_limit() -> None:
    assert list(rounds.chunks(list(range(1, 8)), 3)) == [[1, 2, 3], [4, 5, 6], [7]]


def _one_round(verdicts: list[Verdict], repaired: set[int]):
    """What a full round that is a cycle of its own proves."""
    return rounds.cycle_verified([rounds.part_of(verdicts, repaired, "RCNA", True)])


def test_a_full_round_proves_the_file_only_with_everything_equal_or_repaired() -> None:
    equal = [verdict(1, "match", 5), verdict(2, "match", 3)]
    assert _one_round(equal, set()) == T0 + timedelta(seconds=3)
    drift = [*equal, verdict(3, "differs", 4)]
    assert _one_round(drift, set()) is None
    assert _one_round(drift, {3}) == T0 + timedelta(seconds=3)
    assert _one_round([*equal, verdict(4, "unanswered", None)], set()) is None
    assert _one_round([], set()) is None


def test_tally_in_words() -> None:
    counts = rounds.tally([verdict(1, "match"), verdict(2, "differs"), verdict(3, "match")])
    assert counts == {"match": 2, "differs": 1}
    assert rounds.in_words(counts) == "1 differs, 2 match" and rounds.in_words({}) == ""


def test_drift_ratio_counts_judged_isns_only() -> None:
    got = rounds.drift_ratio([verdict(1, "match"), verdict(2, "extra_in_lake"),
                              verdict(3, "unanswered", None), verdict(4, "missing_in_lake")])
    assert got == pytest.approx(2 / 3)
    assert rounds.drift_ratio([]) == 0.0


def test_a_capped_full_round_takes_the_next_isns_of_its_cycle() -> None:
    known = [3, 1, 7, 5, 9]
    assert rounds.next_part(known, None, None, "RCNA") == ([1, 3, 5, 7, 9], "RCNA", True)
    first = rounds.next_part(known, None, 2, "RCNA")
    assert first == ([1, 3], "RCNA", False)
    part = rounds.Part("RCNA", 3, False, True, T0)
    assert rounds.next_part(known, part, 2, "RCNB") == ([5, 7], "RCNA", False)
    part = rounds.Part("RCNA", 7, False, True, T0)
    assert rounds.next_part(known, part, 2, "RCNC") == ([9], "RCNA", True)
    done = rounds.Part("RCNA", 9, True, True, T0)
    assert rounds.next_part(known, done, 2, "RCND") == ([1, 3], "RCND", False), "a new cycle"


def test_a_cycle_proves_the_file_only_when_complete_and_equal_throughout() -> None:
    t = [T0 + timedelta(seconds=s) for s in (5, 2, 9)]
    parts = [rounds.Part("C", 3, False, True, t[0]), rounds.Part("C", 7, False, True, t[1]),
             rounds.Part("C", 9, True, True, t[2])]
    assert rounds.cycle_verified(parts) == t[1], "the earliest read of the cycle"
    assert rounds.cycle_verified(parts[:2]) is None, "not complete"
    unequal = [parts[0], rounds.Part("C", 7, False, False, t[1]), parts[2]]
    assert rounds.cycle_verified(unequal) is None, "a part with drift left or unanswered"
    part = rounds.part_of([verdict(4, "match", 3), verdict(8, "differs", 1)], {8}, "C", True)
    assert part == rounds.Part("C", 8, True, True, T0 + timedelta(seconds=1))
    assert not rounds.part_of([verdict(4, "unanswered", None)], set(), "C", True).equal
