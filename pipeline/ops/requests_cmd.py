"""``urbpipe request``: send one request to the replicator's input queue, wait for its reply.

Requests are built by the codec (``pipeline.urb.requests``) in the form the conf names
(EBCDIC/ASCII, byte order, code page) and produced to ``topics.requests``. When a reply
destination is named (default ``replicator.reply_destination``, whose topic is
``topics.replies``), the command starts reading that topic at its current end *before* it
sends, so a fast reply cannot be missed, and then waits for URBS replies that carry the
request's token and type (and, for TRAN, its subscription and tsnr — the job's own TRAN
requests use the same default token).

When the reply is complete: TRAN → TRSP; INST → CMPL or ERRO (INIT is progress); OPND/CLSD →
OPEN/CLOS; STAT → one SUBS per subscription/destination pair, so after the first one the
command waits ``--settle`` seconds for more. Any reply with a non-zero response code ends the
wait. An error reply or no reply within ``--timeout`` is a problem (exit 1).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Settings
from pipeline.ops.errors import BrokerUnreachable, UsageError
from pipeline.urb import UrbFormatError, decode_message
from pipeline.urb import requests as urb_requests
from pipeline.urb.codes import describe_status, describe_subcode

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


def parse_isns(text: str) -> list[int | tuple[int, int]]:
    """``"1,5-9,12"`` → [1, (5, 9), 12]."""
    out: list[int | tuple[int, int]] = []
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
            isns = parse_isns(args.isns) if args.isns else None
            value = urb_requests.inst_file(args.name, args.dbid, args.fnr, isns=isns,
                                      selection=args.selection, **common)
            return Request(rt, args.name, value, token)
        value = (urb_requests.open_destination if kind == "open"
                 else urb_requests.close_destination)(args.destination, **common)
        return Request(rt, args.destination, value, token)
    except ValueError as exc:
        raise UsageError(f"request {kind}: {exc}") from None


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
                  "token": (el.urbsrtok or "").strip()}
        out.append(Reply(rt, st, int(el.urbsrsp or 0), int(el.urbssubc or 0), fields))
    return out


def reply_complete(request: Request, replies: list[Reply]) -> bool:
    """Whether no further reply is expected (STAT is decided by the settle time instead)."""
    return any(r.is_error or r.st in FINAL_STATUS[request.rt] for r in replies)


def send(settings: Settings, request: Request, timeout: float) -> None:
    """Produce the request and wait for the broker's acknowledgement."""
    from confluent_kafka import Producer

    producer = Producer({**settings.kafka.confluent(),
                         "message.timeout.ms": str(max(1000, int(timeout * 1000)))})
    errors: list[str] = []
    producer.produce(settings.topics.requests, key=request.key.encode(), value=request.value,
                     headers=[("request", request.rt.encode()), ("origin", b"urbpipe-cli")],
                     on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
    if producer.flush(timeout + 1) > 0 or errors:
        why = errors[0] if errors else "not acknowledged in time"
        raise BrokerUnreachable(f"request not delivered to {settings.topics.requests} at "
                                f"{settings.kafka.bootstrap_servers}: {why}")


def send_and_wait(settings: Settings, request: Request, topic: str | None, *, timeout: float,
                  settle: float = 2.0,
                  clock: Callable[[], float] = time.monotonic) -> list[Reply]:
    """Send; then, when ``topic`` is given, collect the replies until complete or timeout."""
    if topic is None:
        send(settings, request, timeout)
        return []
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**settings.kafka.confluent(), "group.id": f"urbpipe-req-{uuid.uuid4()}",
                         "enable.auto.commit": "false"})
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise BrokerUnreachable(f"broker {settings.kafka.bootstrap_servers} unreachable: "
                                    f"{exc.args[0].str()}") from None
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
        if new and request.rt == "STAT":  # more SUBS may follow: wait `settle` after the last
            deadline = min(give_up, clock() + settle)
    return replies
