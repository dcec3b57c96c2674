"""``urbpipe request``: send one request to the replicator's input queue, wait for its reply.

Requests are built by the codec (``pipeline.urb.requests``) in the form the conf names
(EBCDIC/ASCII, byte order, code page) and produced to ``topics.requests``. When a reply
destination is named (default ``replicator.reply_destination``, whose topic is
``topics.replies``), the command starts reading that topic at its current end *before* it
sends, so a fast reply cannot be missed, and then waits for URBS replies that carry the
request's token and type (and, for TRAN, its subscription and tsnr — the job's own TRAN
requests use the same default token).

When the reply is complete: TRAN → TRSP; INST → CMPL for every file of the request, or ERRO
(INIT is progress); OPND/CLSD → OPEN/CLOS; STAT → one SUBS per subscription/destination pair,
so after the first one the command waits ``--settle`` seconds for more. Any reply with a
non-zero response code ends the wait. An error reply or no reply within ``--timeout`` is a
problem (exit 1), and so is an INST file whose INIT came but whose CMPL did not: its
initial-state processing was still running when the command gave up.

INST sends ONE message for the whole initial-state definition, a URBI per file (seed 000: "If
the initial-state definition includes more than one file-database ID definition for the
request ..., the initial-state request must contain a URBI for each file"). Assumption: the
replicator answers INIT and CMPL per file — seed 000's INIT and CMPL name the file's
URBSDBID/URBSFNR, and the simulator answers so. Should it answer the request as a whole
instead (one INIT and one CMPL naming one file, or none), the command does not wait for the
timeout: once every file that reported INIT has its CMPL it waits ``--settle`` seconds for
the other files' replies and then ends, and a CMPL that names no file completes the request
at once. A file whose INIT came is waited for until ``--timeout``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Settings
from pipeline.errors import UsageError
from pipeline.kafka_refusal import ClientErrors
from pipeline.ops import kafka_clients
from pipeline.urb import UrbFormatError, decode_message
from pipeline.urb import requests as urb_requests
from pipeline.urb.codes import describe_status, describe_subcode
from pipeline.urb.requests import EMPTY_ISN_SELECTION, FileSelection, IsnItem

FINAL_STATUS = {"TRAN": {"TRSP"}, "INST": {"CMPL", "ERRO"}, "OPND": {"OPEN"},
                "CLSD": {"CLOS"}, "STAT": set()}
KINDS = {"tran": "TRAN", "stat": "STAT", "inst": "INST", "open": "OPND", "close": "CLSD"}


@dataclass(frozen=True)
class Request:
    """A built request: its type, Kafka key, wire bytes and what identifies its replies."""

    rt: str
    key: str
    value: bytes
    token: str
    subscription: str = ""
    tsnr: int | None = None
    files: tuple[tuple[int, int], ...] = ()  # INST: (dbid, fnr) of each URBI


@dataclass
class Reply:
    """One URBS answering a request, with the status and subcode in words."""

    rt: str
    st: str
    rsp: int
    subc: int
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return self.rsp != 0 or self.st == "ERRO"

    def as_dict(self) -> dict[str, Any]:
        return {"rt": self.rt, "st": self.st, "rsp": self.rsp, "subc": self.subc,
                "status": describe_status(self.rt, self.st),
                "error": describe_subcode(self.rsp, self.subc) or None, "error_reply":
                self.is_error, **self.fields}

    def describe(self) -> str:
        text = f"{self.rt}/{self.st}: {describe_status(self.rt, self.st)}"
        names = " ".join(f"{k}={v}" for k, v in self.fields.items() if v not in ("", None, 0))
        if self.rsp or self.subc:
            text += f" — response {self.rsp} subcode {self.subc}: " \
                    f"{describe_subcode(self.rsp, self.subc)}"
        return f"{text}  [{names}]" if names else text


def parse_isns(text: str) -> list[IsnItem]:
    """``"1,5-9,12"`` → [1, (5, 9), 12]."""
    out: list[IsnItem] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        try:
            if "-" in item:
                a, b = item.split("-", 1)
                out.append((int(a), int(b)))
            else:
                out.append(int(item))
        except ValueError:
            raise UsageError(f"--isns: {item!r} is not an ISN or START-END range") from None
    return out


def build_request(kind: str, args: Any, settings: Settings, token: str,
                  reply_destination: str) -> Request:
    """The request for an ``urbpipe request <kind>`` command line (args from argparse)."""
    rep = settings.replicator
    form = {"ebcdic": rep.ebcdic, "big_endian": rep.big_endian, "codepage": rep.codepage,
            "sender": "URBPIPE"}
    common = {"rnam": reply_destination, "rtok": token, **form}
    rt = KINDS[kind]
    try:
        if kind == "tran":
            dest = args.destination if args.destination is not None else _home(settings,
                                                                               args.subscription)
            value = urb_requests.tran(args.subscription, dest, args.tsnr, **common)
            return Request(rt, args.subscription, value, token, args.subscription, args.tsnr)
        if kind == "stat":
            value = urb_requests.stat(args.subscription or "", args.destination or "", **common)
            return Request(rt, args.subscription or args.destination or "", value, token)
        if kind == "inst":
            files = inst_files(args, settings)
            value = urb_requests.inst(args.name, files, **common)
            return Request(rt, args.name, value, token, files=tuple((f.dbid, f.fnr)
                                                                   for f in files))
        value = (urb_requests.open_destination if kind == "open"
                 else urb_requests.close_destination)(args.destination, **common)
        return Request(rt, args.destination, value, token)
    except ValueError as exc:
        raise UsageError(f"request {kind}: {exc}") from None


def definition_files(settings: Settings, inam: str) -> list[tuple[int, int]]:
    """(dbid, fnr) of every file of initial-state definition ``inam`` in conf: the files of
    the subscriptions whose ``initial_state`` names it (conf/README: one subscription)."""
    out: list[tuple[int, int]] = []
    for sub in settings.subscriptions:
        if sub.initial_state == inam:
            out += [key for key in sub.file_keys() if key not in out]
    return out


def parse_file_option(text: str) -> tuple[int, list[IsnItem] | None]:
    """``--file FNR[:ISNS]``: ``"9"`` → (9, None), ``"9:1,5-9"`` → (9, [1, (5, 9)])."""
    fnr, _, isns = text.partition(":")
    try:
        number = int(fnr)
    except ValueError:
        raise UsageError(f"--file: {text!r} is not FNR or FNR:ISNS") from None
    return number, (parse_isns(isns) or None) if isns.strip() else None


def inst_files(args: Any, settings: Settings) -> list[FileSelection]:
    """The files of one INST request: the definition's files (``--file`` options plus the
    file DBID FNR names, else conf), each whole, or — when any file has ISNs — each with
    its ISN list or ``EMPTY_ISN_SELECTION`` (an ISN-list definition refuses a URBI without
    data, 131/19); ``--selection`` only for a definition of one file."""
    named = _named_file(args)
    files, isns = _listed_files(args, settings, named)
    target = _selection_target(args, files, named)
    if args.selection is not None:
        if isns:
            raise UsageError("--selection with --file FNR:ISNS: a definition selects its "
                             "records in one manner")
        if len(files) > 1:
            raise UsageError(f"--selection: definition {args.name} has {len(files)} files; "
                             "selection data is only for a definition of one file")
        return [FileSelection(*files[0], selection=args.selection)]
    if args.isns:
        if target in isns:
            raise UsageError(f"file {target[1]}: ISNs given both by --isns and by --file")
        isns[target] = parse_isns(args.isns)
    if not isns:
        return [FileSelection(dbid, fnr) for dbid, fnr in files]
    return [FileSelection(dbid, fnr, isns=isns.get((dbid, fnr), EMPTY_ISN_SELECTION))
            for dbid, fnr in files]


def _named_file(args: Any) -> tuple[int, int] | None:
    if (args.dbid is None) != (args.fnr is None):
        raise UsageError("request inst: give DBID and FNR together")
    return None if args.dbid is None else (args.dbid, args.fnr)


def _listed_files(args: Any, settings: Settings, named: tuple[int, int] | None
                  ) -> tuple[list[tuple[int, int]], dict[tuple[int, int], list[IsnItem]]]:
    """The definition's files in order, and the ISNs ``--file`` gave some of them."""
    conf = definition_files(settings, args.name)
    if not args.files:
        files = conf or ([named] if named else [])
        if not files:
            raise UsageError(f"request inst: no subscription in conf has initial_state "
                             f"{args.name}: give DBID FNR or --file to name its files")
        if named and named not in files:
            raise UsageError(f"request inst: {named[0]}/{named[1]} is not a file of {args.name} "
                             f"in conf ({_names(files)}); list its files with --file")
        return files, {}
    dbids = {dbid for dbid, _ in conf}
    if named is None and len(dbids) != 1:
        raise UsageError("--file: give DBID FNR (the database of the files) as well")
    dbid = named[0] if named else dbids.pop()
    files = [named] if named else []
    isns: dict[tuple[int, int], list[IsnItem]] = {}
    seen: set[int] = set()
    for fnr, given in (parse_file_option(t) for t in args.files):
        if fnr in seen:
            raise UsageError(f"--file: file {fnr} given twice")
        seen.add(fnr)
        if (dbid, fnr) not in files:
            files.append((dbid, fnr))
        if given:
            isns[(dbid, fnr)] = given
    return files, isns


def _selection_target(args: Any, files: list[tuple[int, int]],
                      named: tuple[int, int] | None) -> tuple[int, int] | None:
    """The file ``--isns``/``--selection`` are for: DBID FNR, or the definition's only file."""
    if not args.isns and args.selection is None:
        return named
    if named is None and len(files) > 1:
        raise UsageError(f"request inst: definition {args.name} has files {_names(files)}: "
                         "give DBID FNR of the file --isns/--selection are for")
    return named or files[0]


def _names(files: list[tuple[int, int]]) -> str:
    return ", ".join(f"{dbid}/{fnr}" for dbid, fnr in files)


def _home(settings: Settings, subscription: str) -> str:
    """The subscription's destination from conf when it has exactly one, else blank (all)."""
    for sub in settings.subscriptions:
        if sub.name == subscription and len(sub.destinations) == 1:
            return sub.destinations[0]
    return ""


def reply_topic(settings: Settings, reply_destination: str, override: str | None) -> str:
    """The Kafka topic the reply destination writes to."""
    if override:
        return override
    if reply_destination == settings.replicator.reply_destination:
        return settings.topics.replies
    for topic, dest in settings.topics.outputs.items():
        if dest == reply_destination:
            return topic
    raise UsageError(f"no topic is configured for reply destination {reply_destination!r}; "
                     "give --reply-topic")


def matching_replies(value: bytes, request: Request) -> list[Reply]:
    """The URBS elements of one reply-topic message that answer ``request``."""
    try:
        message = decode_message(value)
    except UrbFormatError:
        return []
    out = []
    for el in message.elements:
        if el.eye != "URBS":
            continue
        rt, st = (el.urbsrt or "").strip(), (el.urbsst or "").strip()
        if (el.urbsrtok or "").strip() != request.token or rt != request.rt:
            continue
        snam = (el.urbssnam or "").strip()
        if request.tsnr is not None and (el.urbstsnr != request.tsnr
                                         or snam not in ("", request.subscription)):
            continue
        fields = {"subscription": snam, "destination": (el.urbsdnam or "").strip(),
                  "initial_state": (el.urbsinam or "").strip(), "tsnr": el.urbstsnr,
                  "token": (el.urbsrtok or "").strip(), "dbid": el.urbsdbid or 0,
                  "fnr": el.urbsfnr or 0}
        out.append(Reply(rt, st, int(el.urbsrsp or 0), int(el.urbssubc or 0), fields))
    return out


def reply_complete(request: Request, replies: list[Reply]) -> bool:
    """Whether no further reply is expected (STAT is decided by the settle time instead).
    INST: an error, or a CMPL for every file (one naming no file stands for all)."""
    if any(r.is_error for r in replies):
        return True
    if request.rt != "INST":
        return any(r.st in FINAL_STATUS[request.rt] for r in replies)
    done = _inst_files(replies, "CMPL")
    return bool(done) and ((0, 0) in done or set(request.files) <= done)


def inst_pending(request: Request, replies: list[Reply]) -> list[tuple[int, int]]:
    """The files of an INST request whose INIT came but whose CMPL has not, in request order:
    their initial-state processing is known to be running. None once a CMPL names no file."""
    if request.rt != "INST" or any(r.is_error for r in replies):
        return []
    done = _inst_files(replies, "CMPL")
    if (0, 0) in done:
        return []
    started = _inst_files(replies, "INIT")
    return [f for f in request.files if f in started and f not in done]


def _inst_files(replies: list[Reply], st: str) -> set[tuple[int, int]]:
    return {(r.fields.get("dbid", 0), r.fields.get("fnr", 0)) for r in replies if r.st == st}


def more_may_follow(request: Request, replies: list[Reply]) -> bool:
    """Whether to wait only ``--settle`` after the last reply: STAT (a SUBS per pair), and an
    INST with a CMPL and no file known to be running (the replicator may have answered the
    request as a whole). A running file is waited for until ``--timeout``."""
    if request.rt == "STAT":
        return True
    return (request.rt == "INST" and any(r.st == "CMPL" for r in replies)
            and not inst_pending(request, replies))


def unfinished(request: Request, replies: list[Reply]) -> str | None:
    """The problem with a reply that ended without completing the request, or None."""
    pending = inst_pending(request, replies)
    if not pending:
        return None
    return (f"INST {request.key} token {request.token}: no INST/CMPL for {_names(pending)} "
            "(INIT came: the initial-state processing may still be running)")


def send(settings: Settings, request: Request, timeout: float) -> None:
    """Produce the request and wait for the broker's acknowledgement."""
    seen = ClientErrors()
    producer = kafka_clients.producer(
        settings, seen, **{"message.timeout.ms": str(max(1000, int(timeout * 1000)))})
    failed: list[Any] = []
    producer.produce(settings.topics.requests, key=request.key.encode(), value=request.value,
                     headers=[("request", request.rt.encode()), ("origin", b"urbpipe-cli")],
                     on_delivery=lambda err, _msg: failed.append(err) if err else None)
    left, fatal = kafka_clients.flush(producer, timeout + 1)
    failed = [*fatal, *failed]
    if left > 0 or failed:
        why = str(failed[0]) if failed else "not acknowledged in time"
        raise kafka_clients.failure(settings, producer, seen,
                                    f"request not delivered to {settings.topics.requests} at "
                                    f"{settings.kafka.bootstrap_servers}: {why}", *failed)


def send_and_wait(settings: Settings, request: Request, topic: str | None, *, timeout: float,
                  settle: float = 2.0,
                  clock: Callable[[], float] = time.monotonic) -> list[Reply]:
    """Send; then, when ``topic`` is given, collect the replies until complete or timeout."""
    if topic is None:
        send(settings, request, timeout)
        return []
    from confluent_kafka import KafkaException, TopicPartition

    seen = ClientErrors()
    consumer = kafka_clients.consumer(settings, seen, **{
        "group.id": f"urbpipe-req-{uuid.uuid4()}", "enable.auto.commit": "false"})
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise kafka_clients.failure(
                settings, consumer, seen, f"broker {settings.kafka.bootstrap_servers} "
                f"unreachable: {exc.args[0].str()}", *exc.args) from None
        if meta is None or meta.error is not None or not meta.partitions:
            raise UsageError(f"reply topic {topic!r} does not exist")
        start = [TopicPartition(topic, p, consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=timeout)[1]) for p in sorted(meta.partitions)]
        consumer.assign(start)
        send(settings, request, timeout)
        return _collect(consumer, request, timeout, settle, clock)
    finally:
        consumer.close()


def _collect(consumer: Any, request: Request, timeout: float, settle: float,
             clock: Callable[[], float]) -> list[Reply]:
    replies: list[Reply] = []
    give_up = clock() + timeout
    deadline = give_up
    while clock() < deadline:
        new: list[Reply] = []
        for msg in consumer.consume(100, timeout=min(0.5, max(0.05, deadline - clock()))):
            if msg.error() is None and msg.value():
                new += matching_replies(msg.value(), request)
        replies += new
        if reply_complete(request, replies):
            break
        if new and more_may_follow(request, replies):  # wait `settle` after the last
            deadline = min(give_up, clock() + settle)
    return replies
