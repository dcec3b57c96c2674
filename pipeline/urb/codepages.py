"""Code page selection for character fields.

EBCDIC messages use the caller's code page (cp037 by default); ASCII messages are decoded as
Latin-1, which maps every byte and therefore can never fail on hostile input.  cp1047 is not in
the standard library; the optional ``ebcdic`` package registers it (and more) when imported.
"""

from __future__ import annotations

import codecs
import contextlib

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


def text_codec(ebcdic: bool, codepage: str) -> str:
    """The codec for a message's character fields."""
    return codepage if ebcdic else ASCII_CODEC
