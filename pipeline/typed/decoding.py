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
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
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
from pipeline.payload.columns import decode_block
from pipeline.typed.layouts import FileLayouts

if TYPE_CHECKING:
    import pyarrow as pa

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

    @cached_property
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


def decode_table(images: pa.Table, spec: DecodeSpec | VersionedSpec,
                 types: Mapping[str, pa.DataType]) -> tuple[dict[str, pa.Array],
                                                            list[str | None]]:
    """``decode_rows`` on an Arrow table, column-wise where it can: each value column of
    ``types`` in that type, and each image's error (None: decoded).

    The images are grouped by the layout that decodes them and their form (ACODE, WCODE,
    ARC); a group's images are decoded at once (``pipeline.payload.columns``) but for those
    that module is unsure of, and every image of a layout it does not decode, which go
    through ``PayloadDecoder`` one by one as in ``decode_rows``. Input columns: ``payload``,
    ``acode``, ``wcode``, ``arc`` and, for a ``VersionedSpec``, ``commit_time``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = images.num_rows
    payloads = images.column("payload").combine_chunks()
    codes = [pc.fill_null(images.column(c), 0).to_numpy(zero_copy_only=False)
             .astype(np.int64) for c in ("acode", "wcode", "arc")]
    # one int per form: ACODE and WCODE are code page numbers (< 2**16), ARC a byte
    forms = (codes[0] << 24) | ((codes[1] & 0xFFFF) << 8) | (codes[2] & 0xFF)
    exact = ((codes[0] >> 40) == 0) & ((codes[1] >> 16) == 0) & ((codes[2] >> 8) == 0)
    picks, errors = _picks(images, spec)
    pieces: dict[str, list[tuple[np.ndarray, pa.Array]]] = {c: [] for c in types}
    for one, rows in picks:
        mine = forms[rows]
        single = len(mine) > 0 and bool((mine == mine[0]).all())  # the common case
        for form in [mine[0]] if single else np.unique(mine):
            group = rows if single else rows[mine == form]
            first = int(group[0])
            form_key = (int(codes[0][first]), int(codes[1][first]), int(codes[2][first]))
            if not exact[group].all():  # codes too large to pack: one by one
                _decode_rows_of(one, group, payloads, types, pieces, errors, codes)
                continue
            slow = _decode_group(one, form_key, group, payloads, types, pieces)
            cache: dict[tuple[int, int, int], Any] = {}
            values: dict[str, list[Any]] = {c: [] for c in types}
            for i in slow:
                payload = payloads[int(i)].as_py()
                row, errors[i] = decode_one(one, cache, payload, *form_key)
                for c in types:
                    values[c].append(None if row is None else row.get(c))
            for c in types:
                pieces[c].append((np.asarray(slow, np.int64), pa.array(values[c], types[c])))
    return {c: _assemble(pieces[c], n, types[c]) for c in types}, errors


def _decode_rows_of(one: DecodeSpec, rows: np.ndarray, payloads: pa.Array,
                    types: Mapping[str, pa.DataType],
                    pieces: dict[str, list[tuple[np.ndarray, pa.Array]]],
                    errors: list[str | None], codes: list[np.ndarray]) -> None:
    """Images decoded one by one, each in its own form."""
    import pyarrow as pa

    cache: dict[tuple[int, int, int], Any] = {}
    values: dict[str, list[Any]] = {c: [] for c in types}
    for i in rows.tolist():
        form_key = (int(codes[0][i]), int(codes[1][i]), int(codes[2][i]))
        row, errors[i] = decode_one(one, cache, payloads[i].as_py(), *form_key)
        for c in types:
            values[c].append(None if row is None else row.get(c))
    for c in types:
        pieces[c].append((rows.astype(np.int64), pa.array(values[c], types[c])))


def _picks(images: pa.Table, spec: DecodeSpec | VersionedSpec
           ) -> tuple[list[tuple[DecodeSpec, np.ndarray]], list[str | None]]:
    """The images each spec decodes (row numbers), and why none does an image (else None):
    a ``VersionedSpec`` picks by commit time, asked once per distinct time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = images.num_rows
    errors: list[str | None] = [None] * n
    if isinstance(spec, DecodeSpec):
        return [(spec, np.arange(n))], errors
    commits = pc.cast(images.column("commit_time"), pa.int64())
    valid = pc.is_valid(commits).to_numpy(zero_copy_only=False)
    none = np.iinfo(np.int64).min  # no commit time: its own group
    stamps = np.where(valid, pc.fill_null(commits, 0).to_numpy(zero_copy_only=False), none)
    times, inverse = np.unique(stamps, return_inverse=True)
    inverse = inverse.reshape(-1)
    layout_of = np.full(len(times), -1, np.int64)
    chosen: dict[int, tuple[int, DecodeSpec]] = {}
    why: dict[int, str] = {}
    for t, stamp in enumerate(times.tolist()):
        one, error = spec.pick(None if stamp == none else stamp)
        if one is None:
            why[t] = str(error)
            continue
        layout_of[t] = chosen.setdefault(id(one.layout), (len(chosen), one))[0]
    row_layout = layout_of[inverse]
    for i in np.flatnonzero(row_layout < 0).tolist():
        errors[i] = why[int(inverse[i])]
    return ([(one, np.flatnonzero(row_layout == k)) for k, one in chosen.values()], errors)


def _decode_group(one: DecodeSpec, form_key: tuple[int, int, int], rows: np.ndarray,
                  payloads: pa.Array, types: Mapping[str, pa.DataType],
                  pieces: dict[str, list[tuple[np.ndarray, pa.Array]]]) -> list[int]:
    """Decode a group's images column-wise into ``pieces``; the rows left to the row
    decoder (all of them when the layout or the form is not for ``columns``)."""
    import pyarrow as pa

    try:
        form = payload_form(codepage=one.codepage, ebcdic=one.ebcdic, acode=form_key[0],
                            wcode=form_key[1], arc=form_key[2])
    except PayloadError:
        return rows.tolist()  # the row decoder says why, image by image
    everyone = len(rows) == len(payloads) and bool((rows == np.arange(len(rows))).all())
    block = decode_block(payloads if everyone else payloads.take(pa.array(rows)), one.layout,
                         form, one.empty)
    if block is None:
        return rows.tolist()
    sure = ~block.unsure
    keep = pa.array(sure)
    for c, kind in types.items():
        column = block.columns.get(c)
        part = (pa.nulls(int(sure.sum()), kind) if column is None
                else column.filter(keep).cast(kind))
        pieces[c].append((rows[sure], part))
    return rows[block.unsure].tolist()


def _assemble(pieces: list[tuple[np.ndarray, pa.Array]], n: int, kind: pa.DataType) -> pa.Array:
    """One column in row order from pieces of (row numbers, values); rows in none: null."""
    import pyarrow as pa

    full = [(rows, arr) for rows, arr in pieces if len(rows)]
    if len(full) == 1 and len(full[0][0]) == n and bool((full[0][0] == np.arange(n)).all()):
        return full[0][1].cast(kind)  # one piece, every row, in order: the common case
    covered = np.zeros(n, bool)
    for rows, _ in pieces:
        covered[rows] = True
    rest = np.flatnonzero(~covered)
    parts = [*pieces, (rest, pa.nulls(len(rest), kind))]
    order = np.concatenate([rows for rows, _ in parts]).astype(np.int64)
    values = pa.concat_arrays([arr.cast(kind) for _, arr in parts])
    position = np.empty(n, np.int64)
    position[order] = np.arange(n, dtype=np.int64)
    return values.take(pa.array(position))
