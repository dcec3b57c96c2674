"""What a state call reports of its key for the on-call metrics (``key_gauges``): the state's
gauges, the rows by kind, and the newest commit per file from events, lists and the fast
path's numpy columns alike."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipeline.reassembly.events import RecordOut, TransactionComplete
from pipeline.reassembly.gaps import Gap
from pipeline.reassembly.state import KeyState
from pipeline.reassembly.storm import Storm
from pipeline.reassembly.tables import transaction_columns
from pipeline.spark.engine.key_gauges import (
    event_commits,
    file_commits,
    newest,
    row_counts,
    state_gauges,
)
from pipeline.urb.stck import TOD_UNIX_US

UNIX_US = 1_750_000_000_000_000


def stck_at(unix_us: int) -> int:
    return (unix_us + TOD_UNIX_US) << 12


def tx(tsnr: int, commit_us: int, fnrs: tuple[int, ...], *, dbid: int = 10006,
       epoch: int = 1) -> TransactionComplete:
    records = tuple(RecordOut(i + 1, fnr, 100 + i, "U", False, 0, 0, stck_at(commit_us), 0)
                    for i, fnr in enumerate(fnrs))
    return TransactionComplete("COLOR", "OUT1", epoch, tsnr, dbid, len(records),
                               stck_at(commit_us), stck_at(commit_us), stck_at(commit_us),
                               False, False, False, "live", "", "t", 0, tsnr, 0, tsnr, 0, 0, 0,
                               records, (), 0)


def test_gauges_of_a_state_with_gaps_a_tripped_breaker_and_no_answer() -> None:
    state = KeyState(gaps=[Gap(1, 5, 6, [5, 6], "lost", 1000, state="requested"),
                           Gap(1, 9, 9, [9], "lost", 3000)], storm=Storm(tripped=True))
    state.stat.answered = True  # a SUBS answered, but gaps are open: not idle
    assert state_gauges(state) == {"gap_states": {"requested": 1, "open": 1},
                                   "oldest_gap_ms": 1000, "outstanding": {"TRAN": 2, "INST": 0},
                                   "storm": 1, "idle": 0}
    quiet = KeyState()
    quiet.stat.answered = True
    assert state_gauges(quiet)["idle"] == 1 and state_gauges(None)["idle"] == 0


def test_rows_are_counted_by_kind() -> None:
    tables = {"alerts": [{"kind": "gap_open", "severity": "warning"},
                         {"kind": "gap_open", "severity": "warning"}],
              "gaps": [{"state": "open"}, {"state": "unrecoverable"}],
              "quarantine": [{"source": "decode"}], "duplicates": [{}, {}],
              "requests": [{"kind": "TRAN"}]}
    assert row_counts(tables) == {
        "alert_kinds": {"gap_open|warning": 2}, "gap_rows": {"open": 1, "unrecoverable": 1},
        "quarantine_sources": {"decode": 1}, "duplicates": 2, "request_kinds": {"TRAN": 1}}
    assert row_counts({})["duplicates"] == 0


def test_newest_commit_per_file_from_events_and_their_columns() -> None:
    events = [tx(1, UNIX_US, (4, 11)), tx(2, UNIX_US + 5, (4,)), tx(3, UNIX_US + 9, (11,),
                                                                    dbid=10007)]
    want = {"10006/4": UNIX_US + 5, "10006/11": UNIX_US, "10007/11": UNIX_US + 9}
    assert event_commits(events) == want
    columns = transaction_columns(events, 0)
    assert file_commits(columns) == want  # lists, as the machine's columns are
    arrays = {table: {name: _array(values) for name, values in cols.items()}
              for table, cols in columns.items()}
    commit = arrays["transactions"]["commit_time"]
    arrays["transactions"]["commit_time"] = np.ma.MaskedArray(commit, mask=[False, True, False])
    # the fast path's numpy columns, one STCK unset: its file keeps the other commit
    assert file_commits(arrays) == {**want, "10006/4": UNIX_US}
    assert file_commits(None) == {} and file_commits(transaction_columns([], 0)) == {}


def _array(values: list) -> np.ndarray:
    if values and isinstance(values[0], str):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.array(values)


@given(st.lists(st.tuples(st.integers(0, 10**9), st.lists(st.integers(1, 3), min_size=1,
                                                          max_size=3)), max_size=20))
def test_file_commits_agree_with_a_plain_loop(spec: list[tuple[int, list[int]]]) -> None:
    events = [tx(i + 1, UNIX_US + us, tuple(fnrs)) for i, (us, fnrs) in enumerate(spec)]
    assert file_commits(transaction_columns(events, 0)) == event_commits(events)
    assert newest(event_commits(events[:3]), event_commits(events[3:])) == event_commits(events)
