"""Response-131 subcode texts and what a TRAN reply does to its tsnr.

The coverage oracle is adapya-era's own subcode table (Software AG, the module docstring of
``pipeline.urb.codes`` names it): every subcode it defines must have a text of ours, in our
words, and ``describe_subcode`` must never call one of them unknown.
"""

from __future__ import annotations

import pytest
from adapya.era import urb as era

from pipeline.urb.codes import (
    SUBCODES_131,
    TRAN_FATAL,
    TRAN_PARK,
    TRAN_SETTLE,
    describe_subcode,
    tran_reply_action,
)

#: The subcodes adapya-era gives a text (index = subcode; '' marks an unused one).
DOCUMENTED = {n for n, text in enumerate(era.texts_reptor_subcodes) if n and text.strip()}


def _words(text: str) -> str:
    return " ".join(text.lower().split())


def test_every_documented_subcode_and_no_other_has_a_text() -> None:
    assert set(range(1, 113)) - {29} == DOCUMENTED  # the table the docstring describes
    assert set(SUBCODES_131) == DOCUMENTED


@pytest.mark.parametrize("subc", sorted(DOCUMENTED))
def test_describe_subcode_knows_every_documented_subcode(subc: int) -> None:
    text = describe_subcode(131, subc)
    assert text == SUBCODES_131[subc]
    assert "unknown subcode" not in text
    assert len(text) >= 20


def test_texts_are_our_own_words() -> None:
    copied = [n for n in DOCUMENTED
              if _words(SUBCODES_131[n]) == _words(era.texts_reptor_subcodes[n])]
    assert copied == []


@pytest.mark.parametrize("subc", [0, 29, 113, 999])
def test_undocumented_subcodes_are_called_unknown(subc: int) -> None:
    assert describe_subcode(131, subc) == f"replicator response 131, unknown subcode {subc}"


@pytest.mark.parametrize(
    ("subc", "words"),
    [
        (34, "no resend buffer"),
        (35, "Requested transaction not found in the resend buffer"),  # the CLI e2e test
        (35, "overwritten"),
        (36, "not active"),
        (37, "resend buffer's copy of the requested transaction is invalid"),
        (12, "no file with the DBID/FNR"),
        (16, "ISN given twice"),
        (49, "truncated"),
    ],
)
def test_subcodes_in_words(subc: int, words: str) -> None:
    assert words in describe_subcode(131, subc)


# --- tran_reply_action ------------------------------------------------------------------------

EXPECTED = {
    **dict.fromkeys([34, 35, 37], "settle"),
    36: "park",
    **dict.fromkeys([31, 32, 33, 38, 39, 40, 41, 42, 43], "fatal"),  # TRAN errors
    **dict.fromkeys([10, 18, 25, 26, 30, 45, 46, 47, 48, 50, 51, 52, 53, 54, 55, 56, 57,
                     58, 88, 99, 100, 108], "fatal"),  # malformed requests
    **dict.fromkeys([3, 4, 17, 27, 28, 44, 49, 87, 96], "retry"),  # may pass
}


@pytest.mark.parametrize(("subc", "action"), sorted(EXPECTED.items()))
def test_each_listed_subcode_is_classified(subc: int, action: str) -> None:
    assert tran_reply_action(131, subc) == action


def test_the_sets_are_disjoint_and_within_the_table() -> None:
    assert not (TRAN_SETTLE & TRAN_PARK or TRAN_SETTLE & TRAN_FATAL or TRAN_PARK & TRAN_FATAL)
    assert TRAN_SETTLE | TRAN_PARK | TRAN_FATAL <= DOCUMENTED


@pytest.mark.parametrize(("rsp", "subc"), [(0, 0), (0, 35)])
def test_response_0_is_ok(rsp: int, subc: int) -> None:
    assert tran_reply_action(rsp, subc) == "ok"


@pytest.mark.parametrize(("rsp", "subc"), [(148, 0), (113, 0), (17, 35), (131, 29),
                                           (131, 113), (131, 0)])
def test_other_responses_and_unknown_subcodes_are_retried(rsp: int, subc: int) -> None:
    assert tran_reply_action(rsp, subc) == "retry"


def _lead_copy(rsp: int, subc: int) -> str:
    """The behaviour the state machine was written against before this table grew."""
    if rsp == 0:
        return "ok"
    if rsp != 131:
        return "retry"
    if subc in (34, 35, 37):
        return "settle"
    if subc == 36:
        return "park"
    return "fatal" if subc in (31, 32, 33, 38, 39, 40, 41, 42, 43) else "retry"


def test_only_request_format_errors_changed_from_retry_to_fatal() -> None:
    changed = {s: (_lead_copy(131, s), tran_reply_action(131, s)) for s in range(0, 200)
               if _lead_copy(131, s) != tran_reply_action(131, s)}
    assert set(changed.values()) == {("retry", "fatal")}
    assert set(changed) == TRAN_FATAL - {31, 32, 33, 38, 39, 40, 41, 42, 43}
