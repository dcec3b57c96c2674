"""``urbpipe reconcile``: its options, its output and its exit code
(``pipeline.ops.reconcile_cmd`` runs the round)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from pipeline import errors
from pipeline.config import Settings
from pipeline.errors import UsageError
from pipeline.ops.reconcile_cmd import Options, RoundResult, run_round
from pipeline.ops.requests_cmd import parse_isns
from pipeline.reconciliation.rounds import in_words

DESCRIPTION = """\
Compare the lake's current_<sub>_<fnr> rows with Adabas, field by field, through the
replicator's own initial-state requests (INST by ISN list, token RCNxxxxx), and let the job
repair what differs: the answers land like any initial-state record (version guard), so a row
found different or missing gets the answered image as its new version, and a row Adabas does
not have (response 113) is removed with a tombstone.

Per file with a layout whose subscription names an initial_state definition (one with ISN-list
selection): the ISNs (--isns, --full: every ISN the lake knows of the file, else a random
sample of reconcile.sample), their rows read before asking, one INST per
reconcile.max_isns_per_request ISNs sent one at a time, then the job's landing of the answers
waited for (until the database's watermark passes their reads: a change committed before a
read is never mistaken for drift, and one committed after it is newer than the answer).

Verdicts per ISN, kept in the Delta table 'reconciliation': match, differs (fields named),
missing_in_lake, extra_in_lake, unanswered (with the reason). A full round with every ISN
equal or repaired writes the file's 'verified_through' row: the time up to which every ISN of
the file was compared and found equal (the earliest read of the round). Cost: one INST request
per reconcile.max_isns_per_request ISNs per file, one record read by the replicator per ISN."""

EXIT = f"""exit codes:
  {errors.OK}  every ISN matched
  {errors.DRIFT}  drift found: some ISN differed, was missing or extra (see 'reconciliation'
     for which were repaired)
  {errors.PROBLEMS}  an ISN unanswered (no answer, or the watermark did not pass its read in
     time) or an INST request failed
  {errors.USAGE}  usage or conf error
  {errors.UNREACHABLE}  broker or lake unreachable
  {errors.REFUSED}  Kafka refused us"""


def add_parser(subs: Any, sub: Callable[..., argparse.ArgumentParser]) -> None:
    p = sub(subs, "reconcile", "compare the lake with Adabas through INST, repair drift",
            DESCRIPTION, cmd_reconcile)
    p.epilog = EXIT
    p.add_argument("--file", dest="files", action="append", default=[], metavar="SUB/FNR",
                   help="a file to check (SUB/FNR or FNR; repeatable; default every file "
                        "with a layout whose subscription has an initial_state)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--isns", help="these ISNs, e.g. 1,5-9 (a range asks each ISN by name)")
    how.add_argument("--full", action="store_true",
                     help="every ISN the lake knows of the file (proves verified_through)")
    how.add_argument("--sample", type=int, help="a random sample of N ISNs per file "
                                                "(default reconcile.sample)")
    p.add_argument("--max-isns", type=int, metavar="N",
                   help="with --full: at most N ISNs per file, the next after where the "
                        "file's previous full round stopped (default "
                        "reconcile.full_round_isns: all); verified_through when a cycle of "
                        "such rounds reaches the file's last ISN")
    p.add_argument("--timeout", type=float,
                   help="seconds to wait for replies and landing (default "
                        "reconcile.timeout_seconds)")
    p.add_argument("--seed", type=int, help="random seed of the sample (reproducible rounds)")
    p.add_argument("--json", action="store_true", help="machine-readable JSON output")


def cmd_reconcile(args: argparse.Namespace, settings: Settings) -> int:
    if args.sample is not None and args.sample < 1:
        raise UsageError("--sample must be at least 1")
    if args.max_isns is not None and (args.max_isns < 1 or not args.full):
        raise UsageError("--max-isns N (at least 1) goes with --full")
    options = Options(files=tuple(args.files), isns=tuple(parse_isns(args.isns or "")),
                      full=args.full, max_isns=args.max_isns, sample=args.sample,
                      timeout=args.timeout, seed=args.seed)
    quiet = args.json
    result = run_round(settings, options,
                       progress=lambda line: None if quiet else print(line, flush=True))
    if args.json:
        print(json.dumps(as_dict(result), indent=2, default=str))
    else:
        print(describe(result))
    return exit_code(result)


def exit_code(result: RoundResult) -> int:
    counts = result.counts()
    if any(counts.get(v, 0) for v in ("differs", "missing_in_lake", "extra_in_lake")):
        return errors.DRIFT
    return errors.PROBLEMS if counts.get("unanswered") else errors.OK


def describe(result: RoundResult) -> str:
    lines = [f"round {result.token}: {result.requests} INST request(s)"]
    for fr in result.files:
        summary = in_words(fr.counts()) or "nothing checked"
        proof = fr.verified_through()
        cycle = ("" if not fr.full or fr.done else
                 f"; cycle {fr.cycle} goes on after ISN {fr.part().last_isn} next round")
        lines.append(f"  {fr.name}: {summary}"
                     + (f"; verified through {proof.isoformat()}" if proof else "") + cycle)
        for v in fr.verdicts:
            if v.verdict == "match":
                continue
            what = f"{v.verdict}" + (f" ({', '.join(v.fields)})" if v.fields else "")
            what += f": {v.reason}" if v.reason else ""
            fixed = " — repaired" if v.isn in fr.repaired else (" — NOT repaired"
                                                                if v.is_drift else "")
            lines.append(f"    ISN {v.isn}: {what}{fixed}")
    for alert in result.alerts:
        lines.append(f"  {alert['severity']}: {alert['message']}")
    if result.undelivered:
        lines.append(f"  error: {result.undelivered}")
    return "\n".join(lines)


def as_dict(result: RoundResult) -> dict[str, Any]:
    return {"round": result.token, "requests": result.requests, "counts": result.counts(),
            "alerts": [{k: a[k] for k in ("kind", "severity", "message")}
                       for a in result.alerts], "undelivered": result.undelivered,
            "files": [{"file": fr.name, "isns": len(fr.isns), "full": fr.full,
                       "verified_through": fr.verified_through(),
                       "verdicts": [{"isn": v.isn, "verdict": v.verdict, "fields": v.fields,
                                     "reason": v.reason, "repaired": v.isn in fr.repaired}
                                    for v in fr.verdicts if v.verdict != "match"]}
                      for fr in result.files]}


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: urbpipe reconcile")
