"""The one exception the codec raises for bad input.

The Spark decode stage quarantines undecodable messages with a reason; it can only do that
reliably if every malformed-input path ends in one exception type that carries where in the
message the problem is and what it is.
"""

from __future__ import annotations


class UrbFormatError(Exception):
    """A message does not follow the URB wire format.

    ``offset`` is the byte offset in the message where the problem was found and ``reason``
    says what is wrong, in words an operator can act on.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(offset, reason)
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return f"at offset {self.offset} (X'{self.offset:04X}'): {self.reason}"
