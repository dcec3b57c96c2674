"""Print decoded messages the way the replicator documentation does, for operators.

One block per element ("URBS element at offset X'0040'"), one line per field, STCK times as
UTC timestamps, status words and response subcodes explained, URBD payloads and URBS/URBI data
as hex with a text column in the message's code page.

Input is one message, or a capture of several messages each prefixed by a 4-byte big-endian
length (the form Kafka dumps and the simulator write).  Auto-detection looks at the first
bytes: a URBH eye-catcher means one message, anything else is read as length-prefixed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from .codepages import ASCII_CODEC, check_codepage, decode_text
from .codes import describe_status, describe_subcode
from .decode import decode_message
from .element import Element, Message
from .errors import UrbFormatError
from .layouts import ALL_TABLES, URBSU, URBSU_DETAIL, UTILITY_NAMES
from .stck import stck_to_datetime
from .walk import ASCII_URBH, EBCDIC_URBH

_DESCRIBE = {
    "urbrtyp": {"D": "delete", "I": "insert", "R": "initial state", "U": "update"},
    "urbdtyp": {"A": "after image", "B": "before image", "K": "key before image"},
    "urbirt": {
        "STAT": "status request",
        "INST": "initial-state request",
        "TRAN": "prior-transaction request",
        "OPND": "open-destination request",
        "CLSD": "close-destination request",
    },
    "urbtcont": {"Y": "continued in the next message"},
    "urbccont": {"Y": "continued in the next message"},
    "urbtrsnd": {"Y": "may have been sent before"},
    "urbrrsnd": {"Y": "may have been sent before"},
    "urbtinst": {"Y": "initial-state data"},
    "urbtptrn": {"Y": "resent by a prior-transaction request"},
}


def split_frames(blob: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, message) for each 4-byte big-endian length-prefixed message in ``blob``."""
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 4:
            raise UrbFormatError(pos, "truncated length prefix")
        size = int.from_bytes(blob[pos : pos + 4], "big")
        if size == 0 or pos + 4 + size > len(blob):
            raise UrbFormatError(pos, f"length prefix {size} runs past the end of the input")
        yield pos + 4, blob[pos + 4 : pos + 4 + size]
        pos += 4 + size


def is_single(blob: bytes) -> bool:
    """Whether the input looks like one bare message rather than length-prefixed ones."""
    return blob[:4] in (EBCDIC_URBH, ASCII_URBH)


def _hexdump(data: bytes, codec: str, indent: str) -> list[str]:
    text = decode_text(data, codec)
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        words = " ".join(chunk[i : i + 4].hex().upper() for i in range(0, len(chunk), 4))
        shown = "".join(c if c.isprintable() else "." for c in text[at : at + 16])
        lines.append(f"{indent}{at:04X} {words:<35} *{shown}*")
    return lines


def _value(el: Element, name: str, typ: str, value: Any) -> str:
    if value is None:
        return "(not in this element)"
    if typ == "T":
        if value == 0:
            return ""
        try:
            return stck_to_datetime(value).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
        except (ValueError, OverflowError):
            return f"X'{value:016X}' (out of range)"
    if typ == "C":
        out = f'"{value}"'
        extra = _DESCRIBE.get(name, {}).get(value)
        if name == "urbsst":
            extra = describe_status(el.fields.get("urbsrt") or "", value)
        return f"{out} {extra}" if extra else out
    if typ == "X":
        return f"X'{value.hex().upper()}'"
    if name == "urbhbord":
        return f"X'{value:04X}'"
    if name in ("urbssubc", "urbrsubc"):
        rsp = el.fields.get("urbsrsp" if name == "urbssubc" else "urbrrsp") or 0
        words = describe_subcode(rsp, value)
        return f"{value} {words}" if words else str(value)
    if name in ("urbtarc", "urbiarc", "urbgffmt", "urbgtype", "urbgflag", "urbfflag"):
        return f"X'{value:02X}'"
    if name == "urbsutyp":
        return f"X'{value:02X}' {UTILITY_NAMES.get(value, 'unknown utility function')}"
    return str(value)


def _rows(eye: str, el: Element) -> list[tuple[str, str]]:
    if eye == "URBSU":
        typ = el.fields.get("urbsutyp")
        rows = list(URBSU) + list(URBSU_DETAIL.get(typ, ()) if typ is not None else ())
    else:
        rows = list(ALL_TABLES[eye])
    return [(name, typ) for _o, name, typ, _l in rows if typ != "F"]


def format_element(el: Element, codec: str, indent: str = "") -> list[str]:
    """The lines for one element (and its nested parts)."""
    lines = [f"{indent}{el.eye} element at offset X'{el.offset:04X}'"]
    inner = indent + "  "
    for name, typ in _rows(el.eye, el):
        if name not in el.fields:
            continue
        lines.append(f"{inner}{name} = {_value(el, name, typ, el.fields[name])}")
    extras = el.extras()
    for key in ("payload", "data"):
        raw = extras.get(key)
        if raw:
            label = "urbddata" if key == "payload" else f"{el.eye.lower()}data"
            lines.append(f"{inner}{label} = {len(raw)} bytes")
            lines.extend(_hexdump(raw, codec, inner + "  "))
    if extras.get("files") is not None:
        lines.append(f"{inner}replay files = {', '.join(map(str, extras['files'])) or '(none)'}")
    if extras.get("isns") is not None:
        shown = ", ".join(
            f"{i[0]}-{i[1]}" if isinstance(i, tuple) else str(i) for i in extras["isns"]
        )
        lines.append(f"{inner}as ISN list = {shown}")
    if extras.get("detail") is not None:
        lines.extend(format_element(extras["detail"], codec, inner))
    for group in extras.get("groups") or []:
        lines.extend(format_element(group, codec, inner))
    return lines


def format_message(msg: Message, codepage: str = "cp037") -> str:
    """A decoded message as text blocks, header first."""
    codec = check_codepage(codepage) if msg.ebcdic else ASCII_CODEC
    form = f"{'EBCDIC ' + codec if msg.ebcdic else 'ASCII'}, " + (
        "big endian" if msg.big_endian else "little endian"
    )
    lines = [f"message: {msg.header.urbhlent} bytes, {form}"]
    for el in [msg.header, *msg.elements]:
        lines.extend(format_element(el, codec))
    lines.extend(f"warning: {w}" for w in msg.warnings)
    return "\n".join(lines)


def dump(blob: bytes, out: TextIO, *, framed: bool | None = None, codepage: str = "cp037") -> int:
    """Print every message in ``blob``; return the number of messages that failed to decode."""
    if framed is None:
        framed = not is_single(blob)
    frames = split_frames(blob) if framed else iter([(0, blob)])
    failures = 0
    count = 0
    try:
        for at, message in frames:
            count += 1
            if framed:
                print(f"=== message {count} at input offset {at} ===", file=out)
            try:
                print(
                    format_message(decode_message(message, codepage=codepage), codepage), file=out
                )
            except UrbFormatError as exc:
                failures += 1
                print(f"error: {exc}", file=out)
    except UrbFormatError as exc:
        failures += 1
        print(f"error in the length-prefixed input: {exc}", file=out)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.urb",
        description="Decode Event Replicator (URB) messages for people.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump", help="print decoded messages like the replicator documentation")
    p.add_argument("file", help="a message file, or - for standard input")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--single",
        dest="framed",
        action="store_false",
        default=None,
        help="the input is one message",
    )
    mode.add_argument(
        "--framed",
        dest="framed",
        action="store_true",
        help="the input is messages each prefixed by a 4-byte big-endian length",
    )
    p.add_argument(
        "--codepage",
        default="cp037",
        help="EBCDIC code page: cp037 (default), cp500, cp273, cp1140, cp1047",
    )
    args = parser.parse_args(argv)
    try:
        check_codepage(args.codepage)
    except ValueError as exc:
        parser.error(str(exc))
    if args.file == "-":
        blob = sys.stdin.buffer.read()
    else:
        try:
            with open(args.file, "rb") as fh:  # noqa: PTH123 - plain CLI file read
                blob = fh.read()
        except OSError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        failures = dump(blob, sys.stdout, framed=args.framed, codepage=args.codepage)
    except BrokenPipeError:  # e.g. piped into head: not an error for the operator
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 1 if failures else 0
