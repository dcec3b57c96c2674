"""Extract the hex dumps of the Event Replicator seed document into binary fixtures.

Run once by hand (the tests never read ../shared; they read the files this writes)::

    .venv/bin/python tests/unit/urb/extract_fixtures.py ../shared/seeds/000_5a01559d0a561156.txt

Why a script and not hand-copied bytes: the dumps are long and a hand copy would hide typos.
The dump format is ``OFFSET WORD WORD WORD WORD text`` runs joined on one line, where the text
column may or may not be framed by ``*`` and may itself look like hex words
(``2004052518354610``).  So the parser does not tokenise blindly: it expects the next offset
(previous + 16) followed by at least one 8-digit word, and treats
``N identical line(s) suppressed`` as N copies of the previous 16 bytes.  Each dump's length is
its URBHLENT (read from the header in the byte order URBHBORD announces); the parser stops there.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FIXTURE_NAMES = [
    "01_clsd_request_ebcdic",
    "02_clsd_reply_clos_ebcdic",
    "03_inst_request_icolor_ebcdic",
    "04_inst_init_reply_ebcdic",
    "05_color_data_ebcdic",
    "06_inst_cmpl_reply_ebcdic",
    "07_inst_erro_reply_ebcdic",
    "08_inst_request_selection_ascii",
    "09_inst_init_reply_ascii",
    "10_employee_data_ascii",
    "11_inst_cmpl_reply_ascii",
    "12_tran_request_ebcdic",
    "13_tran_trsp_reply_ebcdic",
    "14_stat_request_ebcdic",
    "15_stat_subs_reply_ebcdic",
]

_WORDS = re.compile(r"((?:[0-9A-F]{8} ?){1,4})")
_SUPPRESSED = re.compile(r"(\d+) identical line\(s\) suppressed")


def parse_dump(line: str) -> bytes:
    """Turn one joined dump line into the message bytes it shows."""
    out = bytearray()
    pos = 0
    total: int | None = None
    while total is None or len(out) < total:
        expect = f"{len(out):04X} "
        start = line.find(expect, pos)
        supp = _SUPPRESSED.search(line, pos)
        if supp and (start < 0 or supp.start() < start) and len(out) >= 16:
            out += bytes(out[-16:]) * int(supp.group(1))
            pos = supp.end()
            continue
        if start < 0:
            raise ValueError(f"offset {expect!r} not found (have {len(out)} of {total})")
        m = _WORDS.match(line, start + len(expect))
        if not m:
            pos = start + 1
            continue
        words = m.group(1).split()
        out += bytes.fromhex("".join(words))
        pos = m.end()
        if total is None and len(out) >= 16:
            order = "big" if out[10:12] == b"\x00\x01" else "little"
            total = int.from_bytes(out[12:16], order)
    if len(out) != total:
        raise ValueError(f"dump length {len(out)} != URBHLENT {total}")
    return bytes(out)


def extract(text: str) -> list[bytes]:
    """Every dump in the document, in document order."""
    return [parse_dump(line) for line in text.splitlines() if line.startswith("0000 ")]


def main(argv: list[str]) -> int:
    src = Path(argv[1])
    dumps = extract(src.read_text(encoding="utf-8"))
    if len(dumps) != len(FIXTURE_NAMES):
        print(f"expected {len(FIXTURE_NAMES)} dumps, found {len(dumps)}", file=sys.stderr)
        return 1
    out_dir = Path(__file__).with_name("fixtures")
    out_dir.mkdir(exist_ok=True)
    for name, blob in zip(FIXTURE_NAMES, dumps, strict=True):
        (out_dir / f"{name}.bin").write_bytes(blob)
        print(f"{name}.bin {len(blob)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
