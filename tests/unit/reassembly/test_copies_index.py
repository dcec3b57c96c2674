"""numbering.Copies keeps an index beside its window; it must answer as a scan of the window."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reassembly import numbering
from pipeline.reassembly.numbering import _MARGIN_STCK, Copies


def scan_is_copy(seen: list[list], topic: str, htime: int, msnr: int) -> bool:
    """The rule as the window states it: seen before, or sent long before its topic's newest."""
    if not htime:
        return False
    same = [s for s in seen if s[0] == topic]
    if any(s[1] == htime and s[2] == msnr for s in same):
        return True
    return bool(same) and htime < max(s[1] for s in same) - _MARGIN_STCK


messages = st.tuples(st.sampled_from(["a", "b"]),
                     st.sampled_from([0, 1, 2, _MARGIN_STCK + 5, 2 * _MARGIN_STCK + 9]),
                     st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, max_size=40), st.integers(1, 6))
def test_the_index_answers_as_a_scan_of_the_window(stream, window):
    original = numbering.COPY_WINDOW
    numbering.COPY_WINDOW = window  # a small window: the oldest leave often
    try:
        copies = Copies()
        for topic, htime, msnr in stream:
            assert copies.is_copy(topic, htime, msnr) == scan_is_copy(
                copies.seen, topic, htime, msnr)
            copies.add(topic, htime, msnr)
            assert len(copies.seen) <= window
            # a restored state (from_obj) and a clone answer the same
            for other in (Copies.from_obj(copy.deepcopy(copies.seen)), copy.deepcopy(copies)):
                for probe in stream[-3:]:
                    assert other.is_copy(*probe) == scan_is_copy(copies.seen, *probe)
    finally:
        numbering.COPY_WINDOW = original


def test_equality_is_the_window_alone():
    one, two = Copies(), Copies.from_obj([["t", 5, 1]])
    one.add("t", 5, 1)
    assert one == two
    two.add("t", 0, 2)  # no URBHTIME: not kept
    assert one == two and one.to_obj() == [["t", 5, 1]]
