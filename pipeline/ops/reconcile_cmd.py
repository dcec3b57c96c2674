"""``urbpipe reconcile``: one round comparing the lake's ``current_`` tables with Adabas through
INST by ISN list, with the verdicts kept in ``reconciliation`` and each file's proof in
``verified_through``.

A round, per file with a layout whose subscription names an initial-state definition:

1. choose the ISNs (``pipeline.reconciliation.rounds``) and read their lake rows *before*
   asking (the job repairs a row as soon as its answer lands, so the evidence of drift is the
   row read before);
2. send one INST per ``reconcile.max_isns_per_request`` ISNs, one at a time, each waited for
   on the reply topic (INST/CMPL; a 131/44 refusal — IMAXREQ — is retried), with the round's
   token (``RCN…``: the job marks the answers' rows ``origin = 'reconcile'``);
3. wait until the job has landed an answer for every ISN and the database's watermark has
   passed the answers' reads (or no gap is open): every change committed before a read is
   then in the lake;
4. judge each ISN (``pipeline.reconciliation.verdicts``) against the row read in 1 brought up
   to the read by the changes landed since, and see whether the job's landing of the answer
   repaired it (the row's version is now the answer's or newer).

Exit codes: 0 every ISN matched; 6 drift found (repaired or not: ``reconciliation`` says
which); 1 an ISN unanswered or a request failed; 2/3/5 as every command.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipeline.config import Layout, Settings
from pipeline.errors import OpsError, UsageError
from pipeline.ops import reconcile_lake as rl
from pipeline.ops import requests_cmd as rc
from pipeline.ops.lake import Lake
from pipeline.ops.reconcile_alerts import round_alerts, send_alerts
from pipeline.ops.reconcile_tables import PROOF_SCHEMA, PROOFS, RESULT_SCHEMA, RESULTS
from pipeline.reconciliation import rounds
from pipeline.reconciliation.verdicts import Answer, LakeState, Verdict, judge
from pipeline.urb import requests as urb_requests
from pipeline.urb.requests import EMPTY_ISN_SELECTION, FileSelection

#: INST/ERRO 131 subcode 44: too many initial-state requests active (IMAXREQ) — wait, retry.
_BUSY = (131, 44)
_BUSY_RETRIES = 10


class RequestFailed(OpsError):
    exit_code = 1


@dataclass
class FileRound:
    """One file's part of a round."""

    lay: Layout
    isns: list[int]
    full: bool
    fields: list[str] = field(default_factory=list)
    before: dict[int, LakeState] = field(default_factory=dict)
    floor: dict[int, datetime] = field(default_factory=dict)  # answers must be read after
    seen_batch: int = -1  # the newest batch whose MERGE the read of current_ held
    answers: dict[int, Answer] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    repaired: set[int] = field(default_factory=set)
    cycle: str = ""            # a full round: its cycle (rounds.Part)
    done: bool = True          # a full round: it completes its cycle
    parts_before: list[rounds.Part] = field(default_factory=list)  # the cycle's earlier rounds

    @property
    def name(self) -> str:
        return f"{self.lay.subscription}/{self.lay.dbid}/{self.lay.fnr}"

    def counts(self) -> dict[str, int]:
        return rounds.tally(self.verdicts)

    def part(self) -> rounds.Part:
        return rounds.part_of(self.verdicts, self.repaired, self.cycle, self.done)

    def verified_through(self) -> datetime | None:
        """What this round proves: for a full round that completes its cycle, the cycle's
        proof (``rounds.cycle_verified``); else nothing."""
        if not self.full:
            return None
        return rounds.cycle_verified([*self.parts_before, self.part()])


@dataclass(frozen=True)
class Options:
    files: tuple[str, ...] = ()   # SUB/FNR or FNR; empty: every file with a layout
    isns: tuple[int | tuple[int, int], ...] = ()
    full: bool = False
    max_isns: int | None = None  # a full round's cap (default reconcile.full_round_isns)
    sample: int | None = None
    timeout: float | None = None
    seed: int | None = None


Progress = Callable[[str], None]


def targets(settings: Settings, wanted: tuple[str, ...]) -> list[Layout]:
    """The files a round checks: layouts with values whose subscription has an initial-state
    definition (without one the replicator cannot be asked)."""
    inst = {s.name for s in settings.subscriptions if s.initial_state}
    out = []
    for lay in settings.layouts:
        if lay.subscription not in inst:
            continue
        if wanted and not {f"{lay.subscription}/{lay.fnr}", str(lay.fnr)} & set(wanted):
            continue
        out.append(lay)
    if not out:
        raise UsageError("reconcile: no file to check (a file needs a layout, and its "
                         "subscription an initial_state definition)" +
                         (f"; --file {', '.join(wanted)} names none of them" if wanted else ""))
    return out


def plan(lake: Lake, settings: Settings, lay: Layout, options: Options,
         rng: random.Random, token: str) -> FileRound:
    files = rl.FileTables(lay)
    full = options.full and not options.isns
    if options.isns:
        return FileRound(lay, rounds.expand(options.isns), full)
    known = rl.known_isns(lake, files)
    if not full:
        sample = options.sample or settings.reconcile.sample
        return FileRound(lay, rounds.choose(known, sample=sample, rng=rng), full)
    parts = previous_parts(lake, lay)
    cap = options.max_isns or settings.reconcile.full_round_isns
    isns, cycle, done = rounds.next_part(known, parts[-1] if parts else None, cap, token)
    return FileRound(lay, isns, True, cycle=cycle, done=done,
                     parts_before=[p for p in parts if p.cycle == cycle])


def previous_parts(lake: Lake, lay: Layout) -> list[rounds.Part]:
    """The file's earlier full rounds, oldest first (``verified_through`` rows)."""
    import pyarrow.compute as pc

    where = ((pc.field("subscription") == lay.subscription) & (pc.field("dbid") == lay.dbid)
             & (pc.field("fnr") == lay.fnr) & pc.field("full"))
    rows = rl.scan(lake, PROOFS, PROOF_SCHEMA.names, where)
    out = []
    for row in sorted(rows.to_pylist() if rows is not None else [],
                      key=lambda r: rl.naive(r["checked_at"]) or datetime.min):
        out.append(rounds.Part(row.get("cycle") or row["round"], int(row.get("last_isn") or 0),
                               bool(row.get("cycle_done", True)), bool(row.get("equal")),
                               rl.naive(row.get("first_read"))))
    return out


def snapshot(lake: Lake, fr: FileRound) -> None:
    """The lake before asking: each ISN's row, and the time its answer must be read after."""
    files = rl.FileTables(fr.lay)
    fr.fields = rl.value_fields(lake, files)
    fr.before, fr.seen_batch = rl.read_state(lake, files, fr.isns, fr.fields)
    mark = rl.watermark(lake, fr.lay.subscription, fr.lay.dbid).watermark or datetime.min
    fr.floor = {i: max(mark, fr.before[i].version[0]) if i in fr.before else mark
                for i in fr.isns}


def ask(settings: Settings, fr: FileRound, token: str, timeout: float,
        progress: Progress, sleep: Callable[[float], None] = time.sleep) -> int:
    """Send the file's INST requests one at a time; the number sent."""
    sub = next(s for s in settings.subscriptions if s.name == fr.lay.subscription)
    name = sub.initial_state or ""
    definition = rc.definition_files(settings, name)
    rep = settings.replicator
    topic = rc.reply_topic(settings, rep.reply_destination, None)
    sent = 0
    for chunk in rounds.chunks(fr.isns, settings.reconcile.max_isns_per_request):
        selections = [FileSelection(d, f, isns=list(chunk) if (d, f) == (fr.lay.dbid, fr.lay.fnr)
                                    else EMPTY_ISN_SELECTION) for d, f in definition]
        value = urb_requests.inst(name, selections, rnam=rep.reply_destination, rtok=token,
                                  ebcdic=rep.ebcdic, big_endian=rep.big_endian,
                                  codepage=rep.codepage, sender="URBPIPE")
        request = rc.Request("INST", name, value, token, files=tuple(definition))
        _send_until_taken(settings, request, topic, timeout, fr, sleep)
        sent += 1
        progress(f"{fr.name}: INST {name} token {token}: {sent * len(chunk):,} of "
                 f"{len(fr.isns):,} ISNs asked" if sent * len(chunk) < len(fr.isns) else
                 f"{fr.name}: INST {name} token {token}: all {len(fr.isns):,} ISNs asked")
    return sent


def _send_until_taken(settings: Settings, request: rc.Request, topic: str, timeout: float,
                      fr: FileRound, sleep: Callable[[float], None]) -> None:
    for attempt in range(_BUSY_RETRIES):
        replies = rc.send_and_wait(settings, request, topic, timeout=timeout)
        if any((r.rsp, r.subc) == _BUSY for r in replies):
            sleep(min(30.0, 2.0 * 2 ** attempt))
            continue
        errors = [r for r in replies if r.is_error]
        if errors:
            raise RequestFailed(f"{fr.name}: {errors[0].describe()}")
        if not rc.reply_complete(request, replies):
            raise RequestFailed(f"{fr.name}: no INST/CMPL for token {request.token} within "
                                f"{timeout:g}s on {topic}")
        return
    raise RequestFailed(f"{fr.name}: the replicator refused INST {_BUSY_RETRIES} times: "
                        "too many initial-state requests active (131/44)")


def collect(lake: Lake, fr: FileRound) -> bool:
    """Read the answers landed so far; whether every ISN has one."""
    fr.answers = rl.answers(lake, rl.FileTables(fr.lay), fr.floor, fr.fields)
    return len(fr.answers) == len(fr.isns)


def settle(lake: Lake, fr: FileRound) -> bool:
    """Whether every change committed before the answers' reads has landed."""
    if not fr.answers:
        return True
    newest = max(a.version[0] for a in fr.answers.values())
    return rl.watermark(lake, fr.lay.subscription, fr.lay.dbid).passed(newest)


def decide(lake: Lake, fr: FileRound, comparable: bool) -> None:
    landed = rl.landed_changes(lake, rl.FileTables(fr.lay), fr.isns, fr.seen_batch, fr.fields)
    fr.verdicts = [judge(i, fr.before.get(i), landed.get(i, ()), fr.answers.get(i), fr.fields,
                         comparable=comparable) for i in fr.isns]


def check_repairs(lake: Lake, fr: FileRound) -> bool:
    """Which drifted rows the landing of their answer repaired; whether all are."""
    drift = {v.isn: v for v in fr.verdicts if v.is_drift}
    if not drift:
        return True
    now = rl.lake_rows(lake, rl.FileTables(fr.lay), list(drift), fr.fields)
    for isn, v in drift.items():
        row, read = now.get(isn), v.answer_version
        if read is None:
            continue
        landed = row is not None and row.version >= read
        gone = v.verdict == "extra_in_lake" and (row is None or row.deleted)
        if landed or gone:
            fr.repaired.add(isn)
    return len(fr.repaired) == len(drift)


def wait_for(condition: Callable[[], bool], deadline: float, poll: float = 1.0,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> bool:
    while True:
        if condition():
            return True
        if clock() >= deadline:
            return False
        sleep(poll)


@dataclass
class RoundResult:
    token: str
    files: list[FileRound]
    started: datetime
    requests: int
    alerts: list[dict[str, Any]] = field(default_factory=list)
    undelivered: str | None = None  # alerts that could not be sent, why

    def counts(self) -> dict[str, int]:
        return rounds.tally(v for fr in self.files for v in fr.verdicts)


def run_round(settings: Settings, options: Options, progress: Progress,
              clock: Callable[[], float] = time.monotonic) -> RoundResult:
    layouts = targets(settings, options.files)  # a conf problem before the lake's
    lake = Lake(settings)
    lake.require()
    rng = random.Random(options.seed)
    token = rounds.round_token(rng if options.seed is not None else random.Random())
    timeout = options.timeout or settings.reconcile.timeout_seconds
    started = datetime.now(UTC).replace(tzinfo=None)
    files = [plan(lake, settings, lay, options, rng, token) for lay in layouts]
    sent = 0
    for fr in files:
        if not fr.isns:
            progress(f"{fr.name}: the lake knows no ISN of the file: nothing to ask")
            continue
        snapshot(lake, fr)
        sent += ask(settings, fr, token, timeout, progress)
    deadline = clock() + timeout
    for fr in (f for f in files if f.isns):
        got = wait_for(lambda fr=fr: collect(lake, fr), deadline, clock=clock)
        progress(f"{fr.name}: {len(fr.answers):,} of {len(fr.isns):,} answers landed"
                 + ("" if got else f" within {timeout:g}s"))
        comparable = wait_for(lambda fr=fr: settle(lake, fr), deadline, clock=clock)
        if not comparable:
            progress(f"{fr.name}: the watermark did not pass the answers' reads in time")
        decide(lake, fr, comparable)
        wait_for(lambda fr=fr: check_repairs(lake, fr), min(deadline, clock() + 60), clock=clock)
    result = RoundResult(token, files, started, sent)
    record(lake, result)
    result.alerts = round_alerts(settings, token, files)
    result.undelivered = send_alerts(settings, lake, result.alerts)
    return result


def record(lake: Lake, result: RoundResult) -> None:
    """One ``reconciliation`` row per ISN judged; one ``verified_through`` row per file."""
    now = datetime.now(UTC).replace(tzinfo=None)
    rows: list[dict[str, Any]] = []
    proofs: list[dict[str, Any]] = []
    for fr in result.files:
        for v in fr.verdicts:
            rows.append({
                "round": result.token, "subscription": fr.lay.subscription,
                "dbid": fr.lay.dbid, "fnr": fr.lay.fnr, "isn": v.isn, "verdict": v.verdict,
                "fields": list(v.fields), "reason": v.reason or None,
                "lake_version_time": v.lake_version[0] if v.lake_version else None,
                "answer_time": v.answer_version[0] if v.answer_version else None,
                "repaired": v.isn in fr.repaired, "checked_at": now})
        if fr.verdicts:
            part = fr.part()
            proofs.append({
                "round": result.token, "subscription": fr.lay.subscription,
                "dbid": fr.lay.dbid, "fnr": fr.lay.fnr, "full": fr.full,
                "isns": len(fr.verdicts), "drift": sum(v.is_drift for v in fr.verdicts),
                "unanswered": sum(v.verdict == "unanswered" for v in fr.verdicts),
                "verified_through": fr.verified_through(), "checked_at": now,
                "cycle": fr.cycle or None, "last_isn": part.last_isn,
                "cycle_done": fr.done if fr.full else None, "equal": part.equal,
                "first_read": part.first_read})
    if rows:
        lake.append(RESULTS, pa.Table.from_pylist(rows, RESULT_SCHEMA))
    if proofs:
        lake.append(PROOFS, pa.Table.from_pylist(proofs, PROOF_SCHEMA), add_columns=True)
