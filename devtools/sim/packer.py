"""Packing a subscription's transactions into messages, by the output rules of the seed (001).

- One subscription per message (rule 13): there is one packer per subscription.
- A transaction that does not fit continues in the next message (rules 9, 10): the message it
  started in has URBTCONT='Y'; every continuation message starts with a URBC carrying the tsnr
  and the rsnr/dsnr of the last URBR/URBD already sent (dsnr 0 right after a URBR; rsnr 0
  right after the URBT), and URBCCONT='Y' when it continues once more. A split may fall
  between a URBR and its URBDs and between two URBDs of one record.
- Further transactions join a message only whole (rules 11, 17); transactions never
  interleave (rule 12) because each is placed completely before the next one.
- No message exceeds max_size bytes, URBH included.
"""

from __future__ import annotations

from devtools.sim.elements import YES, Part, continuation_part, element_size, header_size

Body = list[Part]


class MessageTooSmall(ValueError):
    """An element cannot fit even into an empty continuation message."""


class Packer:
    """Packs one subscription's transactions; holds the last message open for more."""

    def __init__(self, subscription: str, max_size: int) -> None:
        self.subscription = subscription
        self.max_size = max_size
        self._header = header_size()
        self._open: Body = []
        self._used = self._header

    @property
    def pending(self) -> bool:
        return bool(self._open)

    def add(self, parts: list[Part]) -> list[Body]:
        """Place one whole transaction; returns the message bodies that are now complete."""
        total = sum(p.size for p in parts)
        if self._open and self._used + total <= self.max_size:
            self._open.extend(parts)
            self._used += total
            return []
        done = self.flush()
        done.extend(self._place(parts))
        return done

    def flush(self) -> list[Body]:
        """Close the open message, if any."""
        if not self._open:
            return []
        body, self._open, self._used = self._open, [], self._header
        return [body]

    def _place(self, parts: list[Part]) -> list[Body]:
        """Put a transaction into fresh messages, splitting where the next element won't fit."""
        done: list[Body] = []
        tsnr = parts[0].fields["urbttsnr"]
        rsnr = dsnr = 0
        for part in parts:
            if self._used + part.size > self.max_size:
                if not self._open:
                    raise MessageTooSmall(f"{part.eye} of {part.size} bytes > {self.max_size}")
                done.append(self._split(tsnr, rsnr, dsnr))
                if self._used + part.size > self.max_size:
                    raise MessageTooSmall(f"{part.eye} of {part.size} bytes > {self.max_size}")
            self._open.append(part)
            self._used += part.size
            if part.eye == "URBR":
                rsnr, dsnr = part.fields["urbrrsnr"], 0
            elif part.eye == "URBD":
                dsnr = part.fields["urbddsnr"]
        return done

    def _split(self, tsnr: int, rsnr: int, dsnr: int) -> Body:
        first = self._open[0]
        first.fields["urbtcont" if first.eye == "URBT" else "urbccont"] = YES
        body = self._open
        urbc = continuation_part(self.subscription, tsnr, rsnr, dsnr)
        self._open, self._used = [urbc], self._header + urbc.size
        return body


def minimum_message_size(largest_element: int) -> int:
    """The smallest max size that can carry an element of the given size in a continuation."""
    return header_size() + element_size("URBC") + max(largest_element, element_size("URBT"))
