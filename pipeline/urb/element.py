"""Decoded (or to-be-encoded) URB elements and messages.

An :class:`Element` keeps its DSECT fields in its instance ``__dict__`` so that reading
``el.urbttsnr`` is a plain attribute lookup (the Spark decode stage reads millions of them),
and ``el.fields`` is that same dict, so nothing is copied.  A field the DSECT has but that did
not fit into a short element reads as ``None`` instead of raising.
"""

from __future__ import annotations

from typing import Any

from .layouts import FIELD_NAMES, URBSU_DETAIL

_EXTRA_NAMES: frozenset[str] = frozenset(
    name for rows in URBSU_DETAIL.values() for _o, name, _t, _l in rows
) | {"urbsueye", "urbsutyp"}


class Element:
    """One URB element: ``eye``, ``offset`` in the message and its DSECT fields as attributes.

    Extras by kind: URBD ``payload`` (bytes); URBS ``data`` (bytes), ``detail`` (URBSU element
    for AUTI, else None) and ``files`` (file numbers for RPLS/RPLE, else None); URBF ``groups``
    (list of URBG elements); URBI ``data`` (bytes), ``isns`` (list of ints and (start, end)
    tuples when the data parses as an ISN list, else None) and ``selection`` (the data as text).
    """

    __slots__ = (
        "__dict__",
        "data",
        "detail",
        "eye",
        "files",
        "groups",
        "isns",
        "offset",
        "payload",
        "selection",
    )

    def __init__(self, eye: str, offset: int = 0, fields: dict[str, Any] | None = None) -> None:
        self.eye = eye
        self.offset = offset
        if fields:
            self.__dict__.update(fields)

    @property
    def fields(self) -> dict[str, Any]:
        """All DSECT fields of this element (the live dict, in decode order)."""
        return self.__dict__

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: a DSECT field that did not fit, or an extra
        # slot this kind of element does not have.
        names = FIELD_NAMES.get(self.eye)
        if (names is not None and name in names) or (self.eye == "URBSU" and name in _EXTRA_NAMES):
            return None
        raise AttributeError(f"{self.eye} element has no attribute {name!r}")

    def extras(self) -> dict[str, Any]:
        """The non-DSECT parts (payload, data, groups, …) that are set on this element."""
        out: dict[str, Any] = {}
        for name in ("payload", "data", "detail", "files", "groups", "isns", "selection"):
            try:
                out[name] = object.__getattribute__(self, name)
            except AttributeError:
                continue
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Element):
            return NotImplemented
        return (
            self.eye == other.eye
            and self.__dict__ == other.__dict__
            and self.extras() == other.extras()
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"Element({self.eye!r}, offset={self.offset}, {body})"


class Message:
    """A decoded message: the URBH ``header`` and the ``elements`` after it, in wire order.

    ``warnings`` lists what was skipped but not fatal (unknown eye-catchers); ``ebcdic`` and
    ``big_endian`` record the form the message came in (from URBHEYE and URBHBORD).
    """

    __slots__ = ("big_endian", "ebcdic", "elements", "header", "warnings")

    def __init__(
        self,
        header: Element,
        elements: list[Element],
        warnings: list[str],
        ebcdic: bool,
        big_endian: bool,
    ) -> None:
        self.header = header
        self.elements = elements
        self.warnings = warnings
        self.ebcdic = ebcdic
        self.big_endian = big_endian

    def __repr__(self) -> str:
        eyes = " ".join(e.eye for e in self.elements)
        form = ("EBCDIC" if self.ebcdic else "ASCII") + ("/BE" if self.big_endian else "/LE")
        return f"<Message {form} {len(self.elements)} elements: {eyes}>"
