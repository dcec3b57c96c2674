"""Command line: python -m devtools.sim --help"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from devtools.sim.clock import WallClock
from devtools.sim.config import default_config, load_config, load_settings_config
from devtools.sim.faults import KINDS, FaultPlan
from devtools.sim.load import KafkaRequests, LoadOptions, drive
from devtools.sim.model import SimConfig
from devtools.sim.replicator import Replicator
from devtools.sim.sinks import FileSink, KafkaSink, Sink
from devtools.sim.utility import parse_spec

EPILOG = """\
examples:
  python -m devtools.sim --out run.urb --transactions 500 --seed 7 \\
      --max-message-size 4096 --encoding ascii
  python -m devtools.sim --out gaps.urb --transactions 200 --drop-transactions 2 --restarts 1
  python -m devtools.sim --kafka localhost:9092 --serve --rate 50 --duration 60
  python -m devtools.sim --kafka localhost:9092 --transactions 0 --duration 30 --progress

The file format is 4-byte big-endian length + message, repeated. By default the stream is
what a real replicator behind an MQ source connector delivers: no Kafka key (--key msgid: the
MQ message id as the connector writes it, 48 hex characters, one per message; --key
subscription: the subscription name, or the destination's for STRT/TERM/REST), STRT/REST/TERM
naming neither subscription nor destination, STCK times on a TOD clock with 27 leap seconds
set to UTC+01:00, a resend buffer that overwrites its oldest entries. Faults add what the
connector does on a bad day: --redeliveries (a batch produced again, byte for byte, up to
--redelivery-max messages back), --stalls (a continuation held --stall-seconds).

A subscription over several databases lists files as {dbid, fnr} pairs (--config YAML, or
the job's conf with --settings: files: [{dbid: 10006, fnr: 4}, {dbid: 10007, fnr: 4}]); each
transaction is of one of them. --database 10007:-50 puts a database's clock 50 ms behind the
replicator's (up to +-1000 ms: seed 001, time stamps are machine time); 10007:0:3:40 makes
it a cluster of 3 nuclei (URBTNUCI) whose transactions reach the replicator up to 40 ms after
their commit, so the replicator numbers them in an order that is not their commit order.
Request answers can misbehave too: --resend-delay-seconds, --lose-inst-message,
--inst-max-requests (below).
See devtools/sim/config.py for the YAML keys.
"""

_FAULT_FLAGS = {
    "drop_transaction": ("--drop-transactions", "lose whole transactions (tsnr and msnr gap)"),
    "drop_continuation": ("--drop-continuations", "lose continuation messages (URBC ones)"),
    "duplicate": ("--duplicates", "deliver transactions twice, again with RSND='Y'"),
    "restart": ("--restarts", "abnormal restarts: REST, numbering back to 1"),
    "corrupt": ("--corrupt", "damage the bytes of messages"),
    "redeliver": ("--redeliveries", "the connector produces its last batch of a destination "
                                    "again, byte for byte (up to --redelivery-max messages)"),
    "stall": ("--stalls", "the connector holds a continuation message --stall-seconds "
                          "(Kafka output: the simulator sleeps that long)"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m devtools.sim",
        description="Event Replicator for Adabas simulator: URB message streams to a file or "
        "Kafka, and answers to TRAN/STAT/INST/OPND/CLSD requests.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    out = p.add_argument_group("output (one of)")
    target = out.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", metavar="FILE", help="write length-prefixed messages to FILE")
    target.add_argument("--kafka", metavar="BOOTSTRAP", help="produce to Kafka (host:port)")

    what = p.add_argument_group("stream")
    conf = what.add_mutually_exclusive_group()
    conf.add_argument("--config", metavar="YAML", help="simulator definitions (default: built-in)")
    conf.add_argument(
        "--settings",
        metavar="CONF",
        help="derive destinations, topics and subscriptions from the job's "
        "conf file (e.g. conf/local.yaml)",
    )
    what.add_argument(
        "--transactions",
        type=int,
        default=100,
        metavar="N",
        help="transactions over all subscriptions; 0 = unbounded (default 100)",
    )
    what.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    what.add_argument(
        "--max-message-size",
        type=int,
        metavar="BYTES",
        help="largest message, URBH included (default from config: 32768)",
    )
    what.add_argument(
        "--encoding",
        choices=("ebcdic", "ascii"),
        help="ebcdic = EBCDIC/big endian, ascii = ASCII/little endian, for all "
        "subscriptions (default: per subscription in config)",
    )
    what.add_argument("--max-records", type=int, metavar="N", help="records per transaction, max")
    what.add_argument(
        "--c5-rate",
        type=float,
        metavar="P",
        help="chance of a C5DA user-data status after each transaction",
    )
    what.add_argument("--no-term", action="store_true", help="end without TERM")
    what.add_argument("--key", choices=("none", "msgid", "subscription"),
                      help="Kafka record key the connector writes (default: none)")
    what.add_argument("--tod-utc-offset", metavar="+HH:MM",
                      help="offset of the TOD clock (machine time) from UTC; a negative one as "
                      "--tod-utc-offset=-05:00 (default +01:00; --settings: the job conf's "
                      "replicator.tod_utc_offset)")
    what.add_argument("--tod-leap-seconds", type=int, metavar="N",
                      help="leap seconds the TOD clock includes (default 27; --settings: the job "
                      "conf's replicator.tod_leap_seconds)")
    what.add_argument("--lifecycle-names-destination", action="store_true",
                      help="STRT/REST/TERM name their destination in URBSDNAM")
    what.add_argument(
        "--wall-clock",
        action="store_true",
        help="stamp real time (default for --kafka; files use a simulated clock)",
    )

    load = p.add_argument_group("load mode and serving")
    load.add_argument(
        "--rate",
        type=float,
        default=0.0,
        metavar="TPS",
        help="target transactions per second (default 0 = as fast as possible)",
    )
    load.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this time")
    load.add_argument("--progress", action="store_true", help="progress line on stderr")
    load.add_argument("--json", action="store_true", help="final count as JSON on stdout")
    load.add_argument(
        "--serve",
        action="store_true",
        help="answer requests from the request topic (needs --kafka)",
    )
    load.add_argument(
        "--linger",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --serve: keep answering after the stream ends (-1 = forever)",
    )
    load.add_argument("--request-group", default="urb-sim", help="consumer group for requests")

    faults = p.add_argument_group("faults (deterministic under --seed; counts over the run)")
    for kind, (flag, text) in _FAULT_FLAGS.items():
        faults.add_argument(flag, dest=kind, type=int, default=0, metavar="K", help=text)
    faults.add_argument("--redelivery-max", type=int, metavar="N",
                        help="largest batch a redelivery repeats, in messages (default 2000)")
    faults.add_argument("--stall-seconds", type=float, metavar="S",
                        help="how long a stall holds the continuation (default 600)")
    faults.add_argument(
        "--fault-rate",
        action="append",
        default=[],
        metavar="KIND=P",
        help=f"per-transaction chance instead of a count; KIND in {', '.join(KINDS)}",
    )
    faults.add_argument(
        "--utility-event",
        action="append",
        default=[],
        metavar="AT:STATUS:SUB[:FNR[:UTILITY[:K=V,...]]]",
        help="send a utility/lifecycle status before transaction AT, e.g. "
        "20:AUTI:COLOR:4:refresh_file, 10:LODS:COLOR:4, "
        "15:AUTI:EMPLOYEE:9:change_field_length:fieldname=AS,newlength=7 "
        "(see devtools/sim/utility.py)",
    )
    what.add_argument(
        "--gfft",
        action="append",
        type=int,
        default=[],
        metavar="FNR",
        help="send the GFFT (URBF+URBGs of the payload layout) of file FNR after STRT and "
        "REST, for a job that takes its layouts from the stream (repeatable)",
    )
    faults.add_argument(
        "--wrap",
        action="store_true",
        help="start tsnrs just below 4294967295 so they wrap around to 1",
    )
    faults.add_argument(
        "--database",
        action="append",
        default=[],
        metavar="DBID:OFFSET_MS[:NUCLEI[:LAG_MS]]",
        help="a database's clock runs OFFSET_MS ahead of the replicator's (negative: behind, "
        "within +-1000); NUCLEI > 1: a cluster whose transactions arrive up to LAG_MS after "
        "their commit, out of commit order (repeatable)",
    )
    answers = p.add_argument_group("request answers (with --serve)")
    answers.add_argument(
        "--resend-delay-seconds", type=float, metavar="S",
        help="a successful TRAN's TRSP (response 0) goes to the reply destination at once, "
        "the resend reaches the output topics S seconds later (default 0)")
    answers.add_argument(
        "--lose-inst-message", choices=("first", "middle", "last", "single"),
        help="INST answers lose one data message in transport: the first, a middle or the "
        "last of the answer, or a whole pseudo-transaction sent in one message")
    answers.add_argument(
        "--lose-inst-answers", type=int, metavar="N",
        help="how many INST answers lose a message (default 1; the re-asked one is whole)")
    answers.add_argument(
        "--inst-max-requests", type=int, metavar="N",
        help="IMAXREQ: an INST request arriving while N are in progress is refused with "
        "INST/ERRO 131 subcode 44 (default 0: no limit)")
    answers.add_argument(
        "--inst-busy-seconds", type=float, metavar="S",
        help="how long one INST request stays in progress (default 2)")
    return p


def _databases(specs: Sequence[str]) -> list[dict[str, object]]:
    """``--database DBID:OFFSET_MS[:NUCLEI[:LAG_MS]]`` as DatabaseDef mappings."""
    out: list[dict[str, object]] = []
    for spec in specs:
        parts = spec.split(":")
        if not 2 <= len(parts) <= 4:
            raise ValueError(f"--database {spec!r}: give DBID:OFFSET_MS[:NUCLEI[:LAG_MS]]")
        try:
            values = [int(parts[0]), float(parts[1]), *(int(x) for x in parts[2:])]
        except ValueError:
            raise ValueError(f"--database {spec!r}: numbers expected") from None
        out.append(dict(zip(("dbid", "clock_offset_ms", "nuclei", "nucleus_lag_ms"), values,
                            strict=False)))
    return out


def _config(args: argparse.Namespace) -> SimConfig:
    if args.settings:
        config = load_settings_config(args.settings)
    else:
        config = load_config(args.config) if args.config else default_config()
    if args.encoding:
        config = config.with_encoding(args.encoding)
    update: dict[str, object] = {}
    if args.max_message_size:
        update["max_message_size"] = args.max_message_size
    if args.c5_rate is not None:
        update["c5_rate"] = args.c5_rate
    if args.utility_event:
        parsed = tuple(parse_spec(spec) for spec in args.utility_event)
        update["utility_events"] = config.utility_events + parsed
    if args.gfft:
        update["gfft_files"] = tuple(dict.fromkeys((*config.gfft_files, *args.gfft)))
    for name, value in (("kafka_key", args.key), ("tod_utc_offset", args.tod_utc_offset),
                        ("tod_leap_seconds", args.tod_leap_seconds),
                        ("redelivery_max_messages", args.redelivery_max)):
        if value is not None:
            update[name] = value
    if args.stall_seconds is not None:
        update["stall_ms"] = int(args.stall_seconds * 1000)
    update.update(_answer_settings(args))
    if args.database:
        update["databases"] = _databases(args.database)
    if args.lifecycle_names_destination:
        update["lifecycle_names_destination"] = True
    if args.max_records:
        mix = config.mix.model_copy(update={"max_records": args.max_records})
        update["mix"] = mix.model_copy(
            update={"min_records": min(mix.min_records, args.max_records)}
        )
    return SimConfig.model_validate({**config.model_dump(), **update}) if update else config


def _answer_settings(args: argparse.Namespace) -> dict[str, object]:
    """The request-answer options as SimConfig keys (devtools/sim/answer_faults.py)."""
    out: dict[str, object] = {}
    for name, value, scale in (("resend_delay_ms", args.resend_delay_seconds, 1000),
                               ("inst_busy_ms", args.inst_busy_seconds, 1000),
                               ("inst_lost_answers", args.lose_inst_answers, 1),
                               ("inst_max_requests", args.inst_max_requests, 1)):
        if value is not None:
            out[name] = int(value * scale)
    if args.lose_inst_message:
        out["inst_lost_message"] = args.lose_inst_message
    return out


def _faults(args: argparse.Namespace) -> FaultPlan:
    rates: dict[str, float] = {}
    for item in args.fault_rate:
        kind, _, value = item.partition("=")
        rates[kind.strip()] = float(value)
    counts = {kind: getattr(args, kind) for kind in KINDS if getattr(args, kind)}
    return FaultPlan(counts=counts, rates=rates, wrap=args.wrap)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.serve and not args.kafka:
        parser.error("--serve needs --kafka")
    transactions = args.transactions or None
    try:
        config = _config(args)
        plan = _faults(args)
        clock = WallClock(config.tod_offset_us) if (args.wall_clock or args.kafka) else None
        rep = Replicator(config, args.seed, faults=plan, transactions=transactions, clock=clock)
    except ValueError as exc:
        parser.error(str(exc))
    sink: Sink = FileSink(args.out) if args.out else KafkaSink(args.kafka)
    requests = (
        KafkaRequests(args.kafka, config.request_topic, args.request_group) if args.serve else None
    )
    options = LoadOptions(
        transactions,
        args.duration,
        args.rate,
        args.linger,
        args.progress,
        terminate=not args.no_term,
    )
    try:
        summary = drive(rep, sink, options, requests)
    finally:
        sink.close()
        if requests is not None:
            requests.close()
    print(summary.line(), file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
