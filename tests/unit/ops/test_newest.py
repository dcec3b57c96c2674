"""The newest row of a key from a few files (``pipeline.ops.newest``): the same answer as a
scan of every file, whatever the files hold, reading fewer of them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pipeline.ops.newest import FileStats, newest_by_time, newest_in_sequence

KEYS = [("OUT1", "A"), ("OUT1", "B"), ("OUT2", "A")]

row = st.builds(lambda key, epoch, tsnr, t: {"destination": key[0], "subscription": key[1],
                                             "epoch": epoch, "tsnr": tsnr, "t": t},
                st.sampled_from(KEYS), st.integers(1, 3), st.integers(1, 50),
                st.integers(0, 10**6))
files = st.lists(st.tuples(st.lists(row, min_size=1, max_size=6), st.booleans()), max_size=12)


class FakeFiles:
    """The files' rows by path, counting reads."""

    def __init__(self, content: dict[str, list[dict[str, Any]]]) -> None:
        self.content, self.read = content, []

    def rows(self, path: str) -> list[dict[str, Any]]:
        self.read.append(path)
        return self.content[path]


def stats_of(spec: list[tuple[list[dict[str, Any]], bool]]
             ) -> tuple[list[FileStats], FakeFiles]:
    """Each file's bounds as its Delta log has them (``with_stats`` False: none at all). A
    file is one batch's: its rows carry the batch's time (``t`` of its first row), and its
    modification time grows with it."""
    stats, content = [], {}
    for i, (rows, with_stats) in enumerate(spec):
        path = f"part-{i}.parquet"
        rows = [{**r, "t": rows[0]["t"]} for r in rows]
        content[path] = rows
        names = ("destination", "subscription", "epoch", "tsnr")
        low = {n: min(r[n] for r in rows) for n in names} if with_stats else {}
        high = {n: max(r[n] for r in rows) for n in names} if with_stats else {}
        stats.append(FileStats(path, rows[0]["t"] * 100 + i, low, high))
    return stats, FakeFiles(content)


@given(files)
def test_newest_in_sequence_is_a_full_scans_answer(spec: list) -> None:
    stats, fake = stats_of(spec)
    got = newest_in_sequence(stats, fake, KEYS)  # type: ignore[arg-type]
    for key in KEYS:
        rows = [r for rows, _ in spec for r in rows if (r["destination"], r["subscription"])
                == key]
        want = max((r["epoch"], r["tsnr"]) for r in rows) if rows else None
        have = (got[key]["epoch"], got[key]["tsnr"]) if key in got else None
        assert have == want


def test_files_that_cannot_beat_the_best_are_not_read() -> None:
    spec = [([{"destination": "OUT1", "subscription": "A", "epoch": 1, "tsnr": n, "t": n}],
             True) for n in range(1, 21)]
    stats, fake = stats_of(spec)
    got = newest_in_sequence(stats, fake, [("OUT1", "A"), ("OUT1", "B")])  # type: ignore[arg-type]
    assert got[("OUT1", "A")]["tsnr"] == 20 and ("OUT1", "B") not in got
    assert fake.read == ["part-19.parquet"]  # B is in no file's bounds: nothing read for it


@given(files)
def test_newest_by_time_is_the_newest_files_newest_row(spec: list) -> None:
    stats, fake = stats_of(spec)
    got = newest_by_time(stats, fake, KEYS, "t", max_files=100)  # type: ignore[arg-type]
    for key in KEYS:
        rows = [r for rows in fake.content.values() for r in rows
                if (r["destination"], r["subscription"]) == key]
        assert (got[key]["t"] if key in got else None) == (max(r["t"] for r in rows)
                                                           if rows else None)
