"""Random database transactions against a simulated Adabas file, deterministic under a seed.

The simulator keeps every subscription's records (ISN -> field values) so that updates and
deletes hit records that exist, before images show what the record held, and initial-state
requests can read the current contents back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from devtools.sim.clock import Clock, stck
from devtools.sim.model import DatabaseDef, SimConfig, Subscription
from devtools.sim.payloads import Value, encode_record, random_record, random_value

INSERT, UPDATE, DELETE, REFRESH = "I", "U", "D", "R"
RSP_ISN_NOT_FOUND = 113


@dataclass(frozen=True)
class RecordChange:
    """One URBR and its images: before for updates/deletes, after for inserts/updates."""

    fnr: int
    isn: int
    kind: str
    time: int
    before: bytes | None = None
    after: bytes | None = None
    rsp: int = 0

    def without_after_image(self) -> RecordChange:
        """What the resend buffer keeps of a record: it never stores after images."""
        return RecordChange(self.fnr, self.isn, self.kind, self.time, self.before, None, self.rsp)


@dataclass(frozen=True)
class Transaction:
    """One committed transaction of one subscription and database (times in microseconds
    since 1900: ``commit`` and the records' on the database's clock, ``processed`` on the
    replicator's); ``nucleus``: URBTNUCI, the cluster nucleus that committed it (0: none)."""

    subscription: str
    dbid: int
    commit: int
    processed: int
    guid: bytes
    records: tuple[RecordChange, ...]
    nucleus: int = 0

    def for_resend(self) -> Transaction:
        """The resend buffer's copy: URBT, URBRs and before images only."""
        return replace(self, records=tuple(r.without_after_image() for r in self.records))


class FileRecords:
    """The records of one file: ISN -> values, with O(1) random choice of an existing ISN."""

    def __init__(self) -> None:
        self._isns: list[int] = []
        self._pos: dict[int, int] = {}
        self.values: dict[int, dict[str, Value]] = {}
        self.next_isn = 1

    def __len__(self) -> int:
        return len(self._isns)

    def put(self, isn: int, values: dict[str, Value]) -> None:
        if isn not in self._pos:
            self._pos[isn] = len(self._isns)
            self._isns.append(isn)
        self.values[isn] = values
        self.next_isn = max(self.next_isn, isn + 1)

    def remove(self, isn: int) -> None:
        index = self._pos.pop(isn)
        last = self._isns.pop()
        if last != isn:
            self._isns[index] = last
            self._pos[last] = index
        del self.values[isn]

    def pick(self, rng: random.Random) -> int:
        return self._isns[rng.randrange(len(self._isns))]

    def sorted_isns(self) -> list[int]:
        return sorted(self._isns)


class TransactionGenerator:
    """Makes transactions for the subscriptions of a config and keeps their files current:
    the true current image of every (subscription, dbid, fnr, isn), which tests compare the
    typed current tables with (``file``).

    A subscription over several databases commits each transaction in one of them, drawn at
    random. A database with its own clock or nuclei (``DatabaseDef``) stamps its commit and
    record times on its clock, a nucleus's lag earlier; the replicator still receives them
    in the order they are made here and numbers them so (rule: tsnr order is arrival order).
    """

    def __init__(self, config: SimConfig, rng: random.Random) -> None:
        self._config = config
        self._rng = rng
        self._files: dict[tuple[str, int, int], FileRecords] = {}
        self._primary = {s.name: s.dbid for s in config.subscriptions}
        # the newest commit time of each (subscription, dbid, fnr, isn), on databases with
        # their own clock: a later change of the ISN commits after it (the record lock)
        self._committed: dict[tuple[str, int, int, int], int] = {}
        self._users = [rng.randbytes(8) for _ in range(5)]
        for sub in config.subscriptions:
            for dbid, fnr in sub.file_keys():
                self._files[(sub.name, dbid, fnr)] = self._populate(sub)

    def _populate(self, sub: Subscription) -> FileRecords:
        records = FileRecords()
        for isn in range(1, self._config.records_per_file + 1):
            records.put(isn, random_record(sub.layout, self._rng))
        return records

    def file(self, subscription: str, fnr: int, dbid: int | None = None) -> FileRecords:
        """The records of a file (of ``dbid``; None: the subscription's primary database)."""
        return self._files[(subscription, dbid or self._primary[subscription], fnr)]

    def empty_file(self, subscription: str, fnr: int, dbid: int | None = None) -> None:
        """Refresh (or define) file: no records left, ISNs start at 1 again."""
        self._files[(subscription, dbid or self._primary[subscription], fnr)] = FileRecords()

    def next_transaction(self, sub: Subscription, clock: Clock) -> Transaction:
        """A committed transaction of 1..N records of one database; updates/deletes hit
        existing ISNs."""
        databases = sub.databases()
        dbid = self._rng.choice(databases) if len(databases) > 1 else databases[0]
        mix = self._config.mix
        count = round(self._rng.triangular(mix.min_records, mix.max_records, mix.min_records))
        touched: set[tuple[int, int]] = set()
        records = [self._change(sub, dbid, clock, touched) for _ in range(count)]
        commit = clock.advance(self._rng.randint(10, 200))
        processed = clock.advance(self._rng.randint(100, 3000))
        database = self._config.database(dbid)
        nucleus = 0
        if database is not None and database.on_own_clock:
            records, commit, nucleus = self._on_database_clock(sub.name, database, records,
                                                               commit)
        guid = self._rng.choice(self._users) + stck(commit).to_bytes(8, "big") + bytes(12)
        return Transaction(sub.name, dbid, commit, processed, guid, tuple(records), nucleus)

    def _on_database_clock(self, subscription: str, database: DatabaseDef,
                           records: list[RecordChange], commit: int
                           ) -> tuple[list[RecordChange], int, int]:
        """The transaction's times on its database's clock: the offset, less the lag of the
        nucleus that committed it, never before an earlier commit of an ISN it changes."""
        nucleus, lag = 0, 0
        if database.nuclei > 1:
            nucleus = self._rng.randint(1, database.nuclei)
            lag = self._rng.randint(0, database.nucleus_lag_ms * 1000)
        keys = [(subscription, database.dbid, r.fnr, r.isn) for r in records]
        floor = max((self._committed.get(k, 0) + 1 for k in keys), default=0)
        stamped = max(commit + int(database.clock_offset_ms * 1000) - lag, floor)
        for key in keys:
            self._committed[key] = stamped
        shift = stamped - commit
        return [replace(r, time=r.time + shift) for r in records], stamped, nucleus

    def read_time(self, subscription: str, dbid: int, fnr: int, isns: list[int],
                  now: int) -> int:
        """When a database reading records (initial state) stamps them: ``now`` on its
        clock, after the last commit of each ISN read."""
        database = self._config.database(dbid)
        if database is None or not database.on_own_clock:
            return now
        floor = max((self._committed.get((subscription, dbid, fnr, i), 0) + 1 for i in isns),
                    default=0)
        return max(now + int(database.clock_offset_ms * 1000), floor)

    def _change(
        self, sub: Subscription, dbid: int, clock: Clock, touched: set[tuple[int, int]]
    ) -> RecordChange:
        fnr = self._rng.choice(sub.files_of(dbid))
        records = self._files[(sub.name, dbid, fnr)]
        kind = self._kind(records)
        time = clock.advance(self._rng.randint(5, 500))
        if kind != INSERT:
            isn = records.pick(self._rng)
            if (fnr, isn) in touched:
                kind = INSERT
        if kind == INSERT:
            isn = records.next_isn
            new = random_record(sub.layout, self._rng)
            records.put(isn, new)
            touched.add((fnr, isn))
            return self._images(sub, fnr, isn, kind, time, None, new)
        touched.add((fnr, isn))
        old = records.values[isn]
        if kind == DELETE:
            records.remove(isn)
            return self._images(sub, fnr, isn, kind, time, old, None)
        new = self._modified(sub, old)
        records.put(isn, new)
        return self._images(sub, fnr, isn, kind, time, old, new)

    def _kind(self, records: FileRecords) -> str:
        mix = self._config.mix
        if len(records) == 0:
            return INSERT
        kind = self._rng.choices((INSERT, UPDATE, DELETE), (mix.insert, mix.update, mix.delete))[0]
        if kind == INSERT and len(records) > 2 * self._config.records_per_file + 10:
            return DELETE  # keep a long load run's files (and memory) bounded
        return kind

    def _modified(self, sub: Subscription, old: dict[str, Value]) -> dict[str, Value]:
        new = dict(old)
        for f in self._rng.sample(sub.layout, self._rng.randint(1, len(sub.layout))):
            new[f.name] = random_value(f, self._rng)
        return new

    @staticmethod
    def _images(
        sub: Subscription,
        fnr: int,
        isn: int,
        kind: str,
        time: int,
        old: dict[str, Value] | None,
        new: dict[str, Value] | None,
    ) -> RecordChange:
        before = encode_record(sub.layout, old, sub.encoding) if old and sub.sends_before else None
        after = encode_record(sub.layout, new, sub.encoding) if new and sub.sends_after else None
        return RecordChange(fnr, isn, kind, time, before, after)
