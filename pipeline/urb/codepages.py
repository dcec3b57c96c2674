"""Code page selection for character fields.

EBCDIC messages use the caller's code page (cp037 by default); ASCII messages are decoded as
Latin-1, which maps every byte and therefore can never fail on hostile input.  cp1047 is not in
the standard library; the optional ``ebcdic`` package registers it (and more) when imported.
"""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Mapping
from types import MappingProxyType

with contextlib.suppress(ImportError):  # optional: registers cp1047 and friends
    import ebcdic  # noqa: F401

ASCII_CODEC = "latin-1"
DEFAULT_EBCDIC = "cp037"


def check_codepage(codepage: str) -> str:
    """Return the codec's canonical name or raise ``ValueError`` for an unknown code page."""
    try:
        info = codecs.lookup(codepage)
    except LookupError:
        raise ValueError(
            f"unknown code page {codepage!r} (cp1047 needs the 'ebcdic' package)"
        ) from None
    return info.name


def _canonical(codepage: str) -> str | None:
    try:
        return codecs.lookup(codepage).name
    except LookupError:
        return None


def text_codec(ebcdic: bool, codepage: str) -> str:
    """The codec for a message's character fields."""
    return codepage if ebcdic else ASCII_CODEC


def _latin1_table(codec: str) -> bytes | None:
    """A ``bytes.translate`` table to Latin-1 if every byte of ``codec`` maps into Latin-1.

    Why: ``data.translate(table).decode('latin-1')`` is about three times faster than the
    charmap codec for a whole message, and the decode stage runs it on every message.
    """
    try:
        chars = bytes(range(256)).decode(codec)
        return chars.encode("latin-1")
    except (LookupError, UnicodeError):
        return None


#: Code page name (as ``codecs.lookup`` spells it) -> translate table, for the pages we name.
LATIN1_TABLES: Mapping[str, bytes] = MappingProxyType(
    {
        check: table
        for name in ("cp037", "cp500", "cp273", "cp1140", "cp1047")
        for check in [_canonical(name)]
        if check and (table := _latin1_table(check)) is not None
    }
)


def decode_text(data: bytes, codec: str) -> str:
    """Decode a whole message's bytes with ``codec`` (a canonical name)."""
    table = LATIN1_TABLES.get(codec)
    if table is not None:
        return data.translate(table).decode("latin-1")
    return data.decode(codec)
