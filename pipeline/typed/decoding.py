"""Decode a frame of image rows of one file into typed columns (runs inside mapInPandas).

Why a spec object: the layout and the form inputs are fixed per file, so the Spark side ships
one picklable ``DecodeSpec`` to the executors and ``decode_rows`` builds each
``PayloadDecoder`` once per (ACODE, WCODE, ARC) per call — images of one file almost always
share them — instead of once per image.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pandas as pd

from pipeline.payload import (
    FieldSpec,
    GroupSpec,
    LayoutKey,
    PayloadDecoder,
    PayloadError,
    RecordLayout,
    payload_form,
    spark_type,
)
from pipeline.typed.layouts import FileLayouts

ERROR_COLUMN = "_error"
#: URBDTYP of the images the typed tables decode: the after (A) and before (B) images hold the
#: record. A K image holds the key before the image, not the record: it stays in the raw
#: ``images`` table only (decoding it with the record layout would quarantine it, or land a
#: garbage row in ``changes_``).
TYPED_IMAGE_TYPES: tuple[str, ...] = ("A", "B")


@dataclass(frozen=True)
class DecodeSpec:
    """Everything needed to decode one file's images."""

    layout: RecordLayout
    ebcdic: bool
    codepage: str = "cp037"
    empty: str = "keep"

    @property
    def columns(self) -> list[str]:
        return [i.column for i in self.layout.items if isinstance(i, FieldSpec | GroupSpec)]

    @property
    def decimal_columns(self) -> frozenset[str]:
        """Columns Spark types as decimal although the codec returns ints (B of 5-8 bytes)."""
        return frozenset(i.column for i in self.layout.items if isinstance(i, FieldSpec)
                         and spark_type(i).startswith("decimal") and i.format == "B")

    def decoder(self, acode: int, wcode: int, arc: int) -> PayloadDecoder:
        form = payload_form(codepage=self.codepage, ebcdic=self.ebcdic, acode=acode,
                            wcode=wcode, arc=arc)
        return PayloadDecoder(self.layout, form, empty=self.empty)  # type: ignore[arg-type]

    def pick(self, commit_us: int | None) -> tuple[DecodeSpec | None, str | None]:
        """One layout decodes every image."""
        return self, None


@dataclass(frozen=True)
class VersionedSpec:
    """A file whose images are decoded by the layout that applies at their commit time
    (``pipeline.typed.layouts``): ``types`` is the tables' value columns and their Spark types
    (the union of the layouts'); ``refused`` maps a version's key to why its images are
    quarantined."""

    layouts: FileLayouts
    types: Mapping[str, str]
    ebcdic: bool
    codepage: str = "cp037"
    empty: str = "keep"
    refused: Mapping[LayoutKey, str] = field(default_factory=dict)
    # The replicator's TOD clock ahead of UTC: a GFFT's creation time (URBFTIM1, raw machine
    # time) is compared with a commit time (UTC µs) on the same clock.
    tod_offset_us: int = 0

    @property
    def columns(self) -> list[str]:
        return list(self.types)

    def pick(self, commit_us: int | None) -> tuple[DecodeSpec | None, str | None]:
        machine_us = None if commit_us is None else commit_us + self.tod_offset_us
        layout = self.layouts.pick(machine_us)
        if layout is None:
            return None, "no layout for this file yet (no format buffer, no GFFT received)"
        if layout.key in self.refused:
            return None, self.refused[layout.key]
        return DecodeSpec(layout, self.ebcdic, self.codepage, self.empty), None


def _as_decimal(value: Any) -> Any:
    if isinstance(value, list):
        return [_as_decimal(v) for v in value]
    return Decimal(value) if isinstance(value, int) else value


def decode_one(spec: DecodeSpec, cache: dict[tuple[int, int, int], Any], payload: Any,
               acode: Any, wcode: Any, arc: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(values, None) or (None, reason) for one image."""
    form_key = (int(acode or 0), int(wcode or 0), int(arc or 0))
    try:
        if form_key not in cache:
            cache[form_key] = spec.decoder(*form_key)
        if payload is None:
            raise PayloadError("", 0, "image has no payload")
        values = cache[form_key].decode(bytes(payload))
    except PayloadError as exc:
        return None, str(exc)
    for col in spec.decimal_columns:
        values[col] = _as_decimal(values[col])
    return values, None


def decode_rows(frames: Iterator[pd.DataFrame], spec: DecodeSpec | VersionedSpec
                ) -> Iterator[pd.DataFrame]:
    """Each input frame with the decoded columns and ``_error`` added (values None on error).

    Input columns used: ``payload``, ``acode``, ``wcode``, ``arc`` and, for a
    :class:`VersionedSpec`, ``_commit_us`` (the commit time in µs since 1970); all others pass
    through. A column the image's layout lacks is None.
    """
    # by id: the layouts are the spec's own objects for the whole call (hashing one per image
    # would cost more than the decode)
    caches: dict[int, dict[tuple[int, int, int], Any]] = {}
    chosen: dict[int, DecodeSpec] = {}
    columns = spec.columns
    for pdf in frames:
        values: dict[str, list[Any]] = {c: [] for c in columns}
        errors: list[str | None] = []
        commits = pdf["_commit_us"] if "_commit_us" in pdf else [None] * len(pdf)
        for payload, acode, wcode, arc, commit in zip(
                pdf["payload"], pdf["acode"], pdf["wcode"], pdf["arc"], commits, strict=True):
            one, error = spec.pick(None if commit is None or pd.isna(commit) else int(commit))
            row = None
            if one is not None:
                one = chosen.setdefault(id(one.layout), one)
                row, error = decode_one(one, caches.setdefault(id(one.layout), {}), payload,
                                        acode, wcode, arc)
            errors.append(error)
            for c in columns:
                values[c].append(None if row is None else row.get(c))
        out = pdf.copy()
        for c in columns:
            out[c] = pd.Series(values[c], index=pdf.index, dtype=object)
        out[ERROR_COLUMN] = pd.Series(errors, index=pdf.index, dtype=object)
        yield out
