"""``urbpipe``: the operator's command line for the replicator → Kafka → Delta pipeline.

Every command reads the job's conf (``--conf-file``, default ``conf/local.yaml`` or
``$URBPIPE_CONF``, with the same ``URBPIPE__…`` environment overrides as the job), reads the
lake without Spark (except ``maintain``, whose compaction and vacuum are delta-spark's), and
ends with an exit code scripts can branch on. Errors are one line on
stderr, never a traceback (``URBPIPE_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline import errors
from pipeline.config import ConfigError, Settings, load_settings
from pipeline.errors import BrokerUnreachable, OpsError, UsageError
from pipeline.ops import catalog_cmd, reconcile_cli

INTERNAL_ERROR = 4
CLOSED_PIPE = 141  # standard output closed by its reader (`| head`): 128 + SIGPIPE
EXIT_CODES = f"""exit codes:
  {errors.OK}  ok
  {errors.PROBLEMS}  found problems (open or unacknowledged gaps, an error reply or no reply,
     quarantined messages pending or still failing, failed or overdue INST requests, a
     table maintain skipped for a conflict or an error, a stale file)
  {errors.USAGE}  usage or conf error
  {errors.UNREACHABLE}  broker or lake unreachable
  {INTERNAL_ERROR}  internal error (a bug: rerun with URBPIPE_DEBUG=1 and report it)
  {errors.REFUSED}  Kafka refused us: authentication failed, TLS handshake failed, or an ACL
     is missing
  {errors.DRIFT}  urbpipe reconcile: the lake did not equal Adabas for some ISN
  {CLOSED_PIPE}  standard output closed by its reader (e.g. | head): nothing more printed"""
_RELATIVE = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``2h``/``30m``/``1d``/``45s`` ago, or an ISO-8601 time (UTC when no zone is given)."""
    match = _RELATIVE.match(text.strip())
    if match:
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[match[2]]: int(match[1])})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO time nor a duration like 30m, 2h, 1d") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


# -- commands ----------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.kafka_offsets import message_times
    from pipeline.ops.lake import Lake
    from pipeline.ops.status import build_report, format_report, source_end_offsets

    lake = Lake(settings)
    lake.require()
    ends, broker_error = None, None
    if not args.no_kafka:
        try:
            ends = source_end_offsets(settings, timeout=args.kafka_timeout)
        except BrokerUnreachable as exc:
            broker_error = str(exc)
    metrics = args.metrics_file or settings.location(settings.stream.metrics_file)
    report = build_report(
        settings, lake, end_offsets=ends, metrics_path=metrics, broker_error=broker_error,
        message_times=None if ends is None else
        lambda waiting: message_times(settings, waiting, args.kafka_timeout))
    if args.json:
        _print_json(report.as_dict())
    else:
        print(format_report(report))
    if broker_error:
        print(f"error: {broker_error}", file=sys.stderr)
        return errors.UNREACHABLE
    return errors.PROBLEMS if report.problems else errors.OK


def cmd_request(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops import requests_cmd as rc

    token = args.token or settings.replicator.request_token
    if not 1 <= len(token) <= 8:
        raise UsageError("--token must be 1-8 characters")
    reply_dest = "" if args.no_reply else (args.reply_destination
                                            or settings.replicator.reply_destination)
    request = rc.build_request(args.kind, args, settings, token, reply_dest)
    topic = None if not reply_dest or args.no_wait else rc.reply_topic(
        settings, reply_dest, args.reply_topic)
    replies = rc.send_and_wait(settings, request, topic, timeout=args.timeout,
                               settle=args.settle)
    sent = f"sent {request.rt} (token {token}) to {settings.topics.requests}"
    if args.json:
        _print_json({"request": request.rt, "token": token, "topic": settings.topics.requests,
                     "reply_topic": topic, "replies": [r.as_dict() for r in replies]})
    else:
        print(sent + (f", replies from {topic}:" if topic else ""))
        for reply in replies:
            print(f"  {reply.describe()}")
    if topic is None:
        return errors.OK
    if not replies:
        print(f"error: no reply to {request.rt} token {token} on {topic} within "
              f"{args.timeout:g}s", file=sys.stderr)
        return errors.PROBLEMS
    problem = rc.unfinished(request, replies)
    if problem:
        print(f"error: {problem} within {args.timeout:g}s", file=sys.stderr)
        return errors.PROBLEMS
    return errors.PROBLEMS if any(r.is_error for r in replies) else errors.OK


def cmd_gaps_list(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.gaps_cmd import format_gaps, load_gaps
    from pipeline.ops.lake import Lake

    lake = Lake(settings)
    lake.require()
    gaps = load_gaps(lake)
    shown = gaps if args.all else [g for g in gaps if g.is_problem]
    if args.json:
        _print_json([g.as_dict() for g in shown])
    else:
        print(format_gaps(shown))
    return errors.PROBLEMS if any(g.is_problem for g in gaps) else errors.OK


def cmd_gaps_ack(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.gaps_cmd import acknowledge
    from pipeline.ops.lake import Lake

    lake = Lake(settings)
    lake.require()
    gap = acknowledge(lake, args.gap, args.by, args.note)
    print(f"acknowledged {gap.ref} ({gap.state}, tsnr {gap.row['from_tsnr']}-"
          f"{gap.row['to_tsnr']}) by {args.by}")
    if not settings.alertmanager.url:
        return errors.OK
    from pipeline.alertmanager import AlertmanagerOut, gap_resolved

    pager = AlertmanagerOut(settings)
    if pager.post([gap_resolved(settings, gap.row, gap.ack.at if gap.ack else
                                datetime.now(UTC))]):
        print(f"error: the acknowledgement is recorded, but Alertmanager "
              f"{settings.alertmanager.url} did not take the resolved alert ({pager.error}): "
              "it stays firing until its endsAt; run gaps ack again", file=sys.stderr)
        return errors.UNREACHABLE
    print(f"resolved its alert in Alertmanager {settings.alertmanager.url}")
    return errors.OK


def cmd_gaps_resume(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.kafka_refusal import ClientErrors
    from pipeline.ops import kafka_clients
    from pipeline.ops.gaps_cmd import resume_command

    key, value = resume_command(args.key, args.by, args.note)
    seen = ClientErrors()
    producer = kafka_clients.producer(settings, seen, **{"enable.idempotence": "true"})
    failed: list[Any] = []
    producer.produce(settings.topics.control, key="/".join(key).encode(), value=value,
                     on_delivery=lambda err, _msg: failed.append(err) if err else None)
    left, fatal = kafka_clients.flush(producer, args.kafka_timeout)
    failed = [*fatal, *failed]
    if left > 0 or failed:
        raise kafka_clients.failure(
            settings, producer, seen, f"the control topic {settings.topics.control} did not "
            f"take the command within {args.kafka_timeout:g} s", *failed)
    print(f"resume sent for {'/'.join(key)} on {settings.topics.control}: the job asks "
          "again for the key's open gaps at its next batch (alert storm_resumed)")
    return errors.OK


def cmd_initial_state_list(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.initial_state_cmd import format_requests, load_requests
    from pipeline.ops.lake import Lake

    lake = Lake(settings)
    lake.require()
    found = load_requests(lake, args.since)
    shown = found if args.all else [r for r in found if r.state != "completed"]
    if args.json:
        _print_json([r.as_dict() for r in shown])
    else:
        print(format_requests(shown))
    return errors.PROBLEMS if any(r.is_problem for r in found) else errors.OK


def cmd_quarantine_list(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.lake import Lake
    from pipeline.ops.quarantine_cmd import format_entries, list_entries

    lake = Lake(settings)
    lake.require()
    rows = list_entries(lake, include_replayed=args.all, since=args.since)
    if args.json:
        _print_json(rows)
    else:
        print(format_entries(rows))
    pending = [r for r in rows if r["replayed_at"] is None and r["acked_by"] is None]
    return errors.PROBLEMS if pending else errors.OK


def cmd_quarantine_ack(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.lake import Lake
    from pipeline.ops.quarantine_cmd import acknowledge

    lake = Lake(settings)
    lake.require()
    done = acknowledge(lake, args.rows, args.by, args.note, everything=args.all,
                       since=args.since, source=args.source)
    print(f"acknowledged {len(done)} quarantine row(s) by {args.by}"
          + ("" if done else " (none pending)"))
    return errors.OK


def cmd_quarantine_replay(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.lake import Lake
    from pipeline.ops.quarantine_cmd import replay

    lake = Lake(settings)
    lake.require()
    report = replay(settings, lake, since=args.since, dry_run=args.dry_run)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(report.describe())
        for f in report.failures[:20]:
            print(f"  still failing {f['topic']}[{f['partition']}]@{f['offset']}: {f['error']}")
    return errors.PROBLEMS if report.still_failing else errors.OK


def cmd_files(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.ops.files_cmd import format_files, load_files
    from pipeline.ops.lake import Lake

    lake = Lake(settings)
    lake.require()
    files = load_files(settings, lake)
    if args.json:
        _print_json([f.as_dict() for f in files])
    else:
        print(format_files(files))
    return errors.PROBLEMS if any(f.is_problem for f in files) else errors.OK


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    import time

    from pipeline.ops.lake import Lake
    from pipeline.ops.maintain_plan import human_bytes, plan, summary

    wanted = [t.strip() for t in args.tables.split(",") if t.strip()] if args.tables else None
    chosen = plan(settings, wanted)
    lake = Lake(settings)
    lake.require()
    head = (f"{len(chosen.tables)} tables, target file size "
            f"{human_bytes(chosen.target_file_bytes)}, vacuum retention "
            f"{chosen.retention_hours} h")
    if args.dry_run:
        print(f"would maintain {head}:")
        for table, line in zip(chosen.tables, chosen.describe(), strict=True):
            print(f"  {line}" if lake.exists(table) else f"  {table}: no such table yet, skip")
        return errors.OK
    from pipeline.ops.maintain import run_plan
    from pipeline.spark.engine.session import build_session

    print(f"maintaining {head}", flush=True)
    started = time.monotonic()
    runs = run_plan(build_session(settings), settings, chosen,
                    lambda line: print(line, flush=True))
    for line in summary(runs, time.monotonic() - started):
        print(line)
    return errors.PROBLEMS if any(r.failed for r in runs) else errors.OK


def cmd_dump(args: argparse.Namespace, settings: Settings | None) -> int:
    from pipeline.urb.dump import main as dump_main

    argv = ["dump", args.file, "--codepage",
            args.codepage or (settings.replicator.codepage if settings else "cp037")]
    if args.framed is not None:
        argv.append("--framed" if args.framed else "--single")
    return dump_main(argv)


# -- the parser --------------------------------------------------------------------------------


def _conf_option(parser: argparse.ArgumentParser, *, top: bool) -> None:
    parser.add_argument(
        "--conf-file", metavar="PATH", default=None if top else argparse.SUPPRESS,
        help="the job's conf file (default: $URBPIPE_CONF or conf/local.yaml); "
             "URBPIPE__SECTION__KEY environment overrides apply")


def _sub(subs: Any, name: str, help_text: str, description: str,
         func: Callable[..., int]) -> argparse.ArgumentParser:
    p = subs.add_parser(name, help=help_text, description=description, epilog=EXIT_CODES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _conf_option(p, top=False)
    p.set_defaults(func=func)
    return p


def _group(subs: Any, name: str, help_text: str, description: str) -> Any:
    """A command with actions (``urbpipe gaps list`` …): its subparsers."""
    group = subs.add_parser(name, help=help_text, description=description, epilog=EXIT_CODES,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    return group.add_subparsers(dest="action", required=True, metavar="ACTION")


def _json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable JSON output")


INST_DESCRIPTION = """\
Initial-state request: ONE message with a URBI per file of the initial-state definition, all
naming the definition and the token (seed 000: the replicator wants a URBI for each file of
the definition, with the same definition name and token).

The definition's files come from conf: the subscription whose initial_state is NAME gives
its dbid and files. --file options list them instead, all of them (conf's are then not
used), in database DBID, else in conf's; DBID FNR, when given, is one of them.
No ISNs anywhere: every file is asked for whole. ISNs (--isns for the file DBID FNR, or
--file FNR:ISNS): an ISN-list request, where each file without ISNs gets the empty selection
(the range X'FFFFFFFE'-X'FFFFFFFE', which selects nothing). --selection: selection data, for
a definition of one file.

The command waits for INST/CMPL of every file, or an INST/ERRO. A file whose INIT came but
whose CMPL did not within --timeout is a problem (exit 1): its processing may still run.
Should the replicator answer the request as a whole, the wait ends --settle seconds after
the last CMPL once no file is known to be running.

examples:
  urbpipe request inst ICOLOR                      every file of ICOLOR (conf), whole
  urbpipe request inst IEMPL 10006 9 --isns 1,5-9  ISNs 1 and 5-9 of file 9; nothing of
                                                   the definition's other files (conf)
  urbpipe request inst IEMPL 10006 9 --file 10:3 --file 11
                                                   files 9, 10, 11 of database 10006:
                                                   ISN 3 of file 10, nothing of 9 and 11
  urbpipe request inst IEMPLAA 10006 9 --selection 2001100020011100
                                                   selection data for its one file
"""


def _request_parsers(subs: Any) -> None:
    req = subs.add_parser(
        "request", help="send TRAN/STAT/INST/OPND/CLSD to the replicator and wait for the reply",
        description="Build a request with the codec, send it to topics.requests with a token, "
                    "and when a reply destination is set (default replicator.reply_destination, "
                    "read from topics.replies) wait for the URBS replies carrying the token and "
                    "print them with status and subcode in words.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = req.add_subparsers(dest="kind", required=True, metavar="KIND")
    common = argparse.ArgumentParser(add_help=False)
    _conf_option(common, top=False)
    common.add_argument("--token", help="request token URBIRTOK, 1-8 characters "
                                        "(default replicator.request_token)")
    common.add_argument("--reply-destination", metavar="DNAM",
                        help="reply destination URBIRNAM (default replicator.reply_destination)")
    common.add_argument("--reply-topic", help="Kafka topic of the reply destination (default: "
                                              "topics.replies, or the topics.outputs entry)")
    common.add_argument("--no-reply", action="store_true",
                        help="name no reply destination and do not wait")
    common.add_argument("--no-wait", action="store_true",
                        help="name the reply destination but do not wait for the reply")
    common.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for the reply (default 30)")
    common.add_argument("--settle", type=float, default=2.0,
                        help="STAT: seconds to wait for more SUBS after the last; INST: "
                             "for the other files' replies after a CMPL, once no file is "
                             "known to be running (default 2)")
    _json_option(common)

    def kind(name: str, help_text: str) -> argparse.ArgumentParser:
        p = kinds.add_parser(name, parents=[common], help=help_text, description=help_text,
                             epilog=EXIT_CODES,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=cmd_request)
        return p

    p = kind("tran", "prior-transaction request: resend one transaction from the resend buffer")
    p.add_argument("subscription", help="subscription name (URBISNAM)")
    p.add_argument("tsnr", type=int, help="transaction sequence number to resend")
    p.add_argument("--destination", help="destination (URBIDNAM); default: the subscription's "
                                         "only destination in conf, else blank (all)")
    p = kind("stat", "status request for a subscription, a destination or the pair")
    p.add_argument("--subscription", help="subscription name (URBISNAM)")
    p.add_argument("--destination", help="destination name (URBIDNAM)")
    p = kind("inst", "initial-state request: one message, a URBI per file of the definition")
    p.description = INST_DESCRIPTION
    p.add_argument("name", help="initial-state definition name (URBIINAM)")
    p.add_argument("dbid", type=int, nargs="?", help="database id of the file --isns or "
                                                     "--selection are for")
    p.add_argument("fnr", type=int, nargs="?", help="that file's number")
    p.add_argument("--file", dest="files", action="append", metavar="FNR[:ISNS]",
                   help="a file of the definition, with its ISNs (repeatable; default: the "
                        "files conf gives the definition)")
    sel = p.add_mutually_exclusive_group()
    sel.add_argument("--isns", help="ISN list of the file DBID FNR, e.g. 1,5-9,12 "
                                    "(default: every file whole)")
    sel.add_argument("--selection", help="selection data as text (a definition of one file)")
    kind("open", "open a destination (OPND)").add_argument("destination")
    kind("close", "close a destination (CLSD)").add_argument("destination")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="urbpipe",
        description="Operate the Event Replicator → Kafka → Spark → Delta pipeline: status, "
                    "requests to the replicator, gaps, initial-state requests, quarantine, "
                    "files, lake maintenance, the catalog, message dumps. When something "
                    "pages: docs/runbook.md.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _conf_option(parser, top=True)
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _sub(subs, "status", "per destination/subscription: up to date, idle or behind; gaps",
             "Per (destination, subscription): up to date (nothing waiting on its topic), "
             "idle (nothing waiting, and the replicator's STAT answer said it sent nothing "
             "since), or behind by N messages / S seconds (topic end offsets vs. the newest "
             "completed batch in the query checkpoint; S: how long the oldest waiting message "
             "has waited, by its Kafka time stamp); the newest epoch and landed tsnr, its "
             "commit time and age (freshness), open gaps and their states, the last status "
             "event; the partition count of every topic the job reads (more than one is a "
             "problem: the job refuses to start); and the state size from the job's metrics "
             "file. Reads a few files of the Delta tables (chosen by their log's statistics), "
             "not whole tables, without Spark.", cmd_status)
    _json_option(p)
    p.add_argument("--no-kafka", action="store_true",
                   help="do not ask the broker (lag and partition counts unknown)")
    p.add_argument("--kafka-timeout", type=float, default=5.0,
                   help="seconds to wait for the broker (default 5)")
    p.add_argument("--metrics-file", help="the job's metrics JSON lines "
                                          "(default: stream.metrics_file)")

    _request_parsers(subs)

    gsub = _group(subs, "gaps", "list gaps, acknowledge them",
                  "Gaps in the transaction sequence and their states. "
                  "A gap is a problem while open or requested, or "
                  "unrecoverable and not acknowledged.")
    p = _sub(gsub, "list", "gaps that are problems (--all: every gap)",
             "List gaps by their current state; exit 1 when any is a problem.", cmd_gaps_list)
    p.add_argument("--all", action="store_true", help="also filled and acknowledged gaps")
    _json_option(p)
    p = _sub(gsub, "ack", "acknowledge a gap (recorded in the gap_acks Delta table)",
             "Record who acknowledged a gap and why, in the gap_acks Delta table next to the "
             "job's tables; with alertmanager.url in conf, resolve the gap's alert there too. "
             "What to do about the lost transactions before: docs/runbook.md, "
             "\"gap_unrecoverable\".", cmd_gaps_ack)
    p.add_argument("gap", metavar="GAP_ID",
                   help="DEST/SUBSCRIPTION/EPOCH:TSNR as gaps list shows it (or the bare "
                        "EPOCH:TSNR when unambiguous)")
    p.add_argument("--by", required=True, help="who acknowledges")
    p.add_argument("--note", help="why, or what was done about the lost transactions")
    p = _sub(gsub, "resume", "resume requests for a key whose storm breaker tripped",
             "After a storm_tripped alert (sequence scrambled: ordering or transport problem) "
             "the job stops asking the replicator for the key's missing tsnrs. Once the cause "
             "is fixed (one partition per topic, a connector that keeps order), send this: "
             "the job asks again for every open gap of the key (alert storm_resumed). "
             "Example: urbpipe gaps resume OUT1/COLOR --by alice --note 'topic fixed'",
             cmd_gaps_resume)
    p.add_argument("key", metavar="DEST/SUBSCRIPTION", help="the key, as alerts name it")
    p.add_argument("--by", required=True, help="who resumes")
    p.add_argument("--note", help="what was fixed")
    p.add_argument("--kafka-timeout", type=float, default=10.0, metavar="S",
                   help="how long to wait for Kafka to take the command (default 10)")

    isub = _group(subs, "initial-state", "INST requests and their replies",
                  "Initial-state (INST) requests: the ones the job sent "
                  "after a resend and the ones seen by their replies, "
                  "with their state (requested, started, completed, "
                  "failed, overdue). Failed and overdue ones are "
                  "problems.")
    p = _sub(isub, "list", "INST requests not completed (--all: every one)",
             "List INST requests by their latest state from the requests and alerts tables; "
             "exit 1 when any failed or is overdue.", cmd_initial_state_list)
    p.add_argument("--all", action="store_true", help="also completed requests")
    p.add_argument("--since", type=parse_since, metavar="WHEN",
                   help="only requests updated since WHEN (ISO time, or 30m, 2h, 1d ago)")
    _json_option(p)

    qsub = _group(subs, "quarantine", "list quarantined input, replay it after a fix",
                  "Messages the job could not process.")
    since = {"type": parse_since, "metavar": "WHEN",
             "help": "only rows quarantined since WHEN (ISO time, or 30m, 2h, 1d ago)"}
    p = _sub(qsub, "list", "pending quarantine rows (--all: also replayed and acknowledged)",
             "List quarantine rows; exit 1 when any is pending (neither replayed nor "
             "acknowledged).", cmd_quarantine_list)
    p.add_argument("--all", action="store_true",
                   help="also rows replayed or acknowledged (kept for audit)")
    p.add_argument("--since", **since)
    _json_option(p)
    p = _sub(qsub, "ack", "acknowledge reviewed rows: they stop counting as pending",
             "Record who reviewed quarantine rows and what was decided (the quarantine_acks "
             "Delta table next to the job's tables): they stop counting as pending (list exits "
             "0 once nothing else is), and stay in quarantine for audit (list --all shows "
             "the acknowledgement). Name the rows as list shows them (topic[partition]@offset, "
             "every row of that record), or --all for every pending row, narrowed by --since "
             "and --source. Example: urbpipe quarantine ack 'urb.out1[0]@1234' --by alice "
             "--note 'test message from the connector team'", cmd_quarantine_ack)
    p.add_argument("rows", nargs="*", metavar="TOPIC[PARTITION]@OFFSET")
    p.add_argument("--all", action="store_true", help="every pending row (with the filters)")
    p.add_argument("--since", **since)
    p.add_argument("--source", help="only rows of this source (decode, decode_warning, "
                                    "reassembly, gfft, payload)")
    p.add_argument("--by", required=True, help="who reviewed them")
    p.add_argument("--note", help="what was decided, and why")
    p = _sub(qsub, "replay", "re-decode quarantined messages; re-produce those that decode now",
             "Re-decode the raw bytes of quarantined messages with the current codec and "
             "re-produce the ones that now decode to their original topic (headers "
             "urbpipe-replay and urbpipe-replay-of=topic/partition/offset); the ones still "
             "failing stay. Replays are recorded in the quarantine_replays Delta table so a "
             "message is never replayed twice. Exit 1 when some still fail.",
             cmd_quarantine_replay)
    p.add_argument("--since", **since)
    p.add_argument("--dry-run", action="store_true", help="re-decode and report, send nothing")
    _json_option(p)

    p = _sub(subs, "files", "each Adabas file: active or stale, truncated, layout version",
             "Per file (dbid/fnr): its status from the file_status table — active, stale "
             "(the utility or event that made it so, since when: a load, a lost utility …), "
             "dropped —, the truncate cut-off (changes older predate a refresh/define), and "
             "the layout its typed tables are decoded with: the newest GFFT version the "
             "replicator sent (layouts table) and/or the conf's format buffer. Exit 1 when a "
             "file is stale (docs/runbook.md, UrbpipeFileStale). Reads Delta without Spark.",
             cmd_files)
    _json_option(p)

    p = _sub(subs, "maintain", "compact, vacuum and checkpoint the job's Delta tables",
             "Compact the small files of every table the job writes (Delta OPTIMIZE: files "
             "smaller than maintenance.target_file_size packed into files of about that size; "
             "no row changes), vacuum the files no longer referenced, and checkpoint each "
             "table's Delta log. VACUUM's retention is the longest of Delta's 7 days, "
             "maintenance.vacuum_retention_hours, stream.delta_deleted_file_retention_days "
             "and maintenance.commit_wait_hours (the longest a direct-writer file waits for "
             "its commit): no conf makes it shorter. Safe while the job runs on a file "
             "system, ADLS or HDFS (on S3 only with the DynamoDB log store: conf/README.md, "
             "\"object_store\"). A table whose compaction meets a concurrent commit of the job "
             "is skipped until the next run. Starts Spark (the job's spark section). Prints a "
             "line as each table starts and ends, then a summary: per table, files and bytes "
             "before and after, time taken. Exit 1 when a table was skipped for a conflict or "
             "an error.", cmd_maintain)
    p.add_argument("--tables", metavar="T1,T2",
                   help="comma-separated tables to maintain (default maintenance.tables: all "
                        "the job writes, its typed tables included)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would be done to which table, start no Spark, change "
                        "nothing")

    catalog_cmd.add_parsers(subs, _sub, _group)
    reconcile_cli.add_parser(subs, _sub)

    p = _sub(subs, "dump", "decode captured messages (python -m pipeline.urb dump)",
             "Print messages like the replicator documentation does; exit 1 when some do not "
             "decode.", cmd_dump)
    p.add_argument("file", metavar="FILE|-", help="a message file, or - for standard input")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--single", dest="framed", action="store_false", default=None,
                      help="the input is one message")
    mode.add_argument("--framed", dest="framed", action="store_true",
                      help="messages each prefixed by a 4-byte big-endian length")
    p.add_argument("--codepage", help="EBCDIC code page (default replicator.codepage)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, message already printed)
        return int(exc.code or 0)
    try:
        if args.func is cmd_dump and args.conf_file is None:
            settings = _try_settings()
            return cmd_dump(args, settings)
        settings = load_settings(args.conf_file)
        return args.func(args, settings)
    except ConfigError as exc:
        return _fail(f"conf: {exc}", errors.USAGE)
    except OpsError as exc:
        return _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:  # `urbpipe … | head`: the reader has all it wanted
        return _closed_pipe()
    except Exception as exc:  # one line for operators, never a traceback
        if os.environ.get("URBPIPE_DEBUG"):
            traceback.print_exc()
        return _fail(f"internal error: {type(exc).__name__}: {exc}", INTERNAL_ERROR)


def _closed_pipe() -> int:
    """Leave quietly when standard output's reader went away: what is still buffered goes
    to /dev/null (Python would report its flush at exit), exit 141 like a program that
    SIGPIPE ended (128 + 13)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE


def _try_settings() -> Settings | None:
    """dump works without a conf; the conf only supplies the default code page."""
    try:
        return load_settings()
    except ConfigError:
        return None


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
