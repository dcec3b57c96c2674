"""URB wire-format codec for Software AG Event Replicator for Adabas messages.

Standard library only (the optional ``ebcdic`` package adds cp1047).  See ``decode``,
``encode`` and ``requests`` for the parts; ``python -m pipeline.urb dump FILE`` prints a
message the way the replicator documentation does.
"""

from .decode import decode_message
from .element import Element, Message
from .encode import encode_message, make_element
from .errors import UrbFormatError
from .stck import datetime_to_stck, stck_to_datetime

__all__ = [
    "Element",
    "Message",
    "UrbFormatError",
    "datetime_to_stck",
    "decode_message",
    "encode_message",
    "make_element",
    "stck_to_datetime",
]
