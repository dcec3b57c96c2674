"""Record layouts: what a URBD image holds, field by field, as frozen data.

A layout is a tuple of items in payload order:

``FieldSpec``  one Adabas field: short name, column, format, byte length, decimal scale, and
               either a single value, a fixed number of occurrences (MU/PE ``AB1-3``) or a
               variable number read from an earlier count field (``ABC`` … ``AB1-N``).
               Length 0 is a variable-length value (``AA,0,A``): each value is preceded by
               its length in ``prefix`` bytes (1; 2 for LA fields, 4 for LB), the length
               counting the prefix itself, as Adabas returns such values
``GroupSpec``  a PE group laid out occurrence by occurrence (``GA1-3`` → AR1,AS1,AR2,AS2,…),
               decoded as a list of dicts
``Filler``     ``nX``: bytes to skip

Why frozen dataclasses: a layout is shared by every decode of a file's images (and shipped to
Spark executors), so it must not change under anyone's feet; ``to_dict``/``from_dict`` make it
JSON-serialisable for the registry and for checkpointed state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import LayoutError

#: Format -> (allowed byte lengths or None for any 1..limit, limit, what it decodes to).
#: Lengths follow the Adabas field definitions; the codec does not check FDT maxima beyond them.
#: Length 0 (variable) is valid for the formats in ``VARIABLE``.
FORMATS: dict[str, tuple[frozenset[int] | None, int, str]] = {
    "A": (None, 253, "str: alphanumeric in the payload's code page"),
    "W": (None, 253, "str: wide characters per WCODE"),
    "B": (None, 126, "int (unsigned, ≤ 8 bytes) or bytes (longer)"),
    "F": (frozenset({1, 2, 4, 8}), 8, "int: signed two's complement"),
    "P": (None, 15, "Decimal: packed, sign in the last nibble"),
    "U": (None, 29, "Decimal: unpacked/zoned, sign in the last byte's zone"),
    "G": (frozenset({4, 8}), 8, "float: IBM hexadecimal or IEEE 754 per ARC"),
}
#: Formats a variable-length value (length 0) may have; a variable B value stays bytes.
VARIABLE = frozenset("AWBPU")
#: Width of a variable-length value's length prefix: 1, or 2 for LA and 4 for LB fields.
PREFIXES = frozenset({1, 2, 4})
#: Digits of a variable-length P or U value at most (15 packed bytes, 29 zoned bytes).
VARIABLE_DIGITS = 29


@dataclass(frozen=True)
class FieldSpec:
    """One field.  ``occurrences`` None = one value; an int = that many (a list);
    ``count_field`` set = as many as the named earlier count field says (a list).
    ``length`` 0 = variable length, each value after a ``prefix``-byte length."""

    name: str
    column: str
    format: str
    length: int
    scale: int = 0
    occurrences: int | None = None
    count_field: str | None = None
    prefix: int = 1
    #: the GFFT's long name (URBGFNAM) of a field from the stream ("" from a format buffer):
    #: described in the typed column's comment, never part of a layout's identity
    long_name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise LayoutError(f"{self.name}: unknown format {self.format!r}")
        if self.variable:
            self._check_variable()
        else:
            lengths, limit, _ = FORMATS[self.format]
            if self.length < 1 or self.length > limit or (lengths and self.length not in lengths):
                raise LayoutError(
                    f"{self.name}: length {self.length} not valid for format {self.format}"
                )
            if self.prefix != 1:
                raise LayoutError(f"{self.name}: a length prefix needs length 0 (variable)")
        if self.scale and self.format not in "PU":
            raise LayoutError(f"{self.name}: a scale needs format P or U, not {self.format}")
        if not 0 <= self.scale <= self.digits:
            raise LayoutError(f"{self.name}: scale {self.scale} outside 0..{self.digits}")
        _check_occurrences(self.name, self.occurrences, self.count_field)

    def _check_variable(self) -> None:
        if self.format not in VARIABLE:
            raise LayoutError(
                f"{self.name}: format {self.format} cannot have length 0 "
                f"(variable length is for {', '.join(sorted(VARIABLE))})"
            )
        if self.prefix not in PREFIXES:
            raise LayoutError(f"{self.name}: length prefix {self.prefix} is not 1, 2 or 4")
        if self.counts is not None:
            raise LayoutError(f"{self.name}: a count field cannot have length 0")

    @property
    def variable(self) -> bool:
        """Length 0: each value carries its own length (``AA,0,A``)."""
        return self.length == 0

    @property
    def min_size(self) -> int:
        """Fewest bytes one value takes: its length, or a variable value's prefix."""
        return self.length or self.prefix

    @property
    def digits(self) -> int:
        """Decimal digits a P or U field holds (0 for other formats)."""
        if self.variable:
            return VARIABLE_DIGITS if self.format in "PU" else 0
        return {"P": 2 * self.length - 1, "U": self.length}.get(self.format, 0)

    @property
    def repeated(self) -> bool:
        return self.occurrences is not None or self.count_field is not None

    @property
    def counts(self) -> str | None:
        """The MU/PE name this is the count field of (``ABC`` counts ``AB``), else None."""
        return self.name[:2] if len(self.name) == 3 and self.name.endswith("C") else None


@dataclass(frozen=True)
class GroupSpec:
    """A PE group read occurrence by occurrence; each occurrence is a dict of its members."""

    name: str
    column: str
    members: tuple[FieldSpec, ...]
    occurrences: int | None = None
    count_field: str | None = None

    def __post_init__(self) -> None:
        if not self.members:
            raise LayoutError(f"{self.name}: a PE group needs members")
        if any(m.repeated for m in self.members):
            raise LayoutError(f"{self.name}: MU fields inside a PE group are not supported")
        _check_occurrences(self.name, self.occurrences, self.count_field)
        if self.occurrences is None and self.count_field is None:
            raise LayoutError(f"{self.name}: a PE group needs occurrences (GA1-3 or GA1-N)")

    @property
    def length(self) -> int:
        """Bytes of one occurrence (at least, if a member has variable length)."""
        return sum(m.min_size for m in self.members)


@dataclass(frozen=True)
class Filler:
    """``nX`` in a format buffer: bytes in the image that belong to no column."""

    length: int

    def __post_init__(self) -> None:
        if self.length < 1:
            raise LayoutError(f"filler length {self.length} must be positive")


Item = FieldSpec | GroupSpec | Filler


@dataclass(frozen=True, order=True)
class LayoutKey:
    """Which file and GFFT version a layout describes (``created``: URBFTIM1 STCK, 0 = conf)."""

    dbid: int
    fnr: int
    gfid: str = ""
    created: int = 0


@dataclass(frozen=True)
class RecordLayout:
    """The items of one image in payload order, plus where the layout came from."""

    items: tuple[Item, ...]
    key: LayoutKey | None = None
    source: str = "conf"  # "conf" or "gfft"
    fixed_size: int | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        _check_items(self.items)
        variable = any(getattr(i, "count_field", None) or _has_variable(i) for i in self.items)
        size = None if variable else sum(_item_size(i) for i in self.items)
        object.__setattr__(self, "fixed_size", size)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(i.column for i in self.items if not isinstance(i, Filler))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the registry and Spark state keep layouts this way)."""
        return {
            "items": [_item_to_dict(i) for i in self.items],
            "key": asdict(self.key) if self.key else None,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordLayout:
        key = LayoutKey(**data["key"]) if data.get("key") else None
        items = tuple(_item_from_dict(d) for d in data["items"])
        return cls(items, key, data.get("source", "conf"))


def _check_occurrences(name: str, occurrences: int | None, count_field: str | None) -> None:
    if occurrences is not None and count_field is not None:
        raise LayoutError(f"{name}: fixed occurrences and a count field are exclusive")
    if occurrences is not None and occurrences < 1:
        raise LayoutError(f"{name}: occurrences must be at least 1")


def _check_items(items: tuple[Item, ...]) -> None:
    """Columns unique; every variable occurrence count comes from an earlier count field."""
    seen_names: set[str] = set()
    seen_columns: set[str] = set()
    for item in items:
        if isinstance(item, Filler):
            continue
        if item.column in seen_columns:
            raise LayoutError(f"{item.name}: column {item.column!r} used twice")
        counter = item.count_field
        if counter is not None and counter not in seen_names:
            raise LayoutError(f"{item.name}: count field {counter} must come before it")
        seen_columns.add(item.column)
        seen_names.add(item.name)


def _has_variable(item: Item) -> bool:
    if isinstance(item, GroupSpec):
        return any(m.variable for m in item.members)
    return isinstance(item, FieldSpec) and item.variable


def _item_size(item: Item) -> int:
    if isinstance(item, Filler):
        return item.length
    return item.length * (item.occurrences or 1)


def _item_to_dict(item: Item) -> dict[str, Any]:
    kind = type(item).__name__
    data = _without_empty_long_name(asdict(item))
    if isinstance(item, GroupSpec):
        data["members"] = [_without_empty_long_name(asdict(m)) for m in item.members]
    return {"kind": kind, **data}


def _without_empty_long_name(data: dict[str, Any]) -> dict[str, Any]:
    """A field with no long name keeps the form layouts had before long names were kept."""
    if data.get("long_name") == "":
        del data["long_name"]
    return data


def _item_from_dict(data: dict[str, Any]) -> Item:
    data = dict(data)
    kind = data.pop("kind")
    if kind == "Filler":
        return Filler(**data)
    if kind == "GroupSpec":
        data["members"] = tuple(FieldSpec(**m) for m in data["members"])
        return GroupSpec(**data)
    if kind == "FieldSpec":
        return FieldSpec(**data)
    raise LayoutError(f"unknown layout item kind {kind!r}")
