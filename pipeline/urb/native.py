"""The routing scan's common case in compiled code, with the pure-Python scan as the rule.

The decode stage scans every message for the names that key it (``scan.scan_message``): a
walk of the whole element chain, ~300 elements in a 13 KB message, in Python about 0.3 ms
per message — most of the stage (decision 0008). Almost every
message is well formed: a chain of transaction elements (URBT, URBR, URBD, URBE, URBC …)
whose first URBT/URBC/URBE names the subscription, and now and then a status (URBS). For
those, ``urbwalk.rs`` (this folder; safe Rust, no crates, built by ``make setup`` with the
machine's ``rustc`` into ``liburbwalk.so`` beside it) walks the chain, reads the name and
says where the statuses are (they route by their own fields: the caller scans those few) in
~10 µs instead of ~110-190 µs for a 7.8 KB message. The decode stage hands it a whole Arrow
batch at once (:meth:`NativeRouter.walk_many`, ``urbwalk_route_many``: one call per message
form, over the batch's own buffer): a call per message cost more in ctypes than the walk.

It answers nothing else: a message with a broken header or chain, an unknown eye-catcher, a
code page without a Latin-1 table, a GFFT (URBF, routed by its database and file when no
element names a subscription) or more than 64 statuses makes it *defer*, and the caller runs
the Python scan — so every refusal is still worded by the full decoder's rules, and the
library never has to agree with Python on an error. Where
the package is imported from a zip (``spark-submit --py-files``), the library inside it is
copied to a temporary file and loaded from there. Where it is not built (no ``rustc`` on the
machine) or cannot load (another platform), :func:`load_router` returns None and the job runs
the Python scan alone: same rows, slower (the job logs which one it runs).
``tests/unit/integration/test_native_routing.py`` holds the two to the same answer on generated,
mutated and random messages; ``tests/unit/reassembly/test_native_walk.py`` does the same for the
columnar reader's chain walk (:class:`ChainWalker`), the library's second entry point.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pkgutil
import tempfile
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .codepages import ASCII_CODEC, LATIN1_TABLES
from .layouts import ELEMENT_TABLES
from .walk import FORMS, HEAD_KEYS, MIN_HEADER, form_heads

LIBRARY = Path(__file__).resolve().parent / "native" / "liburbwalk.so"
_NAME_CAP = 64
_STATUS_CAP = 64  # statuses one message may have for the library; more: the Python scan
_PLAIN, _NAMED, _DEFER, _STATUS = 0, 1, 2, 3


@lru_cache(maxsize=4)
def _library(path: str) -> ctypes.PyDLL | None:
    """The library at ``path``, loaded once per process; None where it cannot be loaded.
    PyDLL: a call holds the GIL (it takes microseconds), so a caller's output buffers are
    never shared mid-call."""
    for candidate in (path, _unzipped(path)):
        if candidate is not None:
            try:
                return ctypes.PyDLL(candidate)
            except OSError:
                continue
    return None


def _unzipped(path: str) -> str | None:
    """Where the package was imported from a zip (``spark-submit --py-files``, README "Running
    on a real cluster"), the library inside it, copied to a file of its own: the dynamic
    loader reads only real files. Only for the package's own library."""
    if path != str(LIBRARY) or Path(path).exists():
        return None
    try:
        data = pkgutil.get_data(__package__ or "pipeline.urb", "native/liburbwalk.so")
    except OSError:
        return None
    if not data:
        return None
    target = Path(tempfile.gettempdir()) / (
        f"urbpipe-{hashlib.sha256(data).hexdigest()[:16]}-liburbwalk.so")
    if not target.exists():  # written whole, then renamed: another worker may race us
        partial = target.with_name(f"{target.name}.{os.getpid()}")
        partial.write_bytes(data)
        partial.replace(target)
    return str(target)


def _route_function(path: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """The routing scan's entry point, or None when the library is not built."""
    lib = _library(path)
    if lib is None:
        return None
    fn = lib.urbwalk_route
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                   ctypes.POINTER(ctypes.c_uint32), ctypes.c_size_t,
                   ctypes.POINTER(ctypes.c_int64)]
    fn.restype = ctypes.c_int64
    return fn


def _route_many_function(path: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """The batch entry point (one call per form and batch), or None: a library built before
    it (the caller walks message by message then)."""
    lib = _library(path)
    fn = getattr(lib, "urbwalk_route_many", None) if lib is not None else None
    if fn is None:
        return None
    p = ctypes.c_void_p
    fn.argtypes = [p, ctypes.c_size_t, p, p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_size_t, ctypes.c_char_p, p, ctypes.c_size_t, p]
    fn.restype = ctypes.c_int64
    return fn


def _plan(eyes: Mapping[bytes, str], name_fields: Mapping[str, str],
          deferred: Iterable[str], located: Iterable[str]) -> bytes:
    """The library's plan for one form: per known eye-catcher, 8 bytes (see urbwalk.rs)."""
    deferred, located = frozenset(deferred), frozenset(located)
    out = bytearray()
    for eyeb, eye in eyes.items():
        action, at, length = _PLAIN, 0, 0
        if eye in located:
            action = _STATUS
        elif eye in deferred:
            action = _DEFER
        elif eye in name_fields:
            at, length = next((off, ln) for off, name, _typ, ln in ELEMENT_TABLES[eye]
                              if name == name_fields[eye])
            action = _NAMED
        out += eyeb + bytes((action, at, length, 0))
    return bytes(out)


class Walked(NamedTuple):
    """What the library found in a well-formed message: the subscription its data elements
    name ('' if none), its statuses' (offset, length) in order, and how many statuses come
    before its first data element (-1: it has none)."""

    subscription: str
    statuses: list[tuple[int, int]]
    data_at: int


class NativeRouter:
    """What routes a well-formed message (:class:`Walked`), or None (run the Python scan).

    ``name_fields`` maps the kinds that name a message's subscription to their name field
    (the first non-blank one wins, as ``decode_stage._subscription_of`` reads them);
    ``deferred`` lists the kinds that route by their own fields in ways the caller does not
    take from the library (URBF); ``located`` the kinds whose places it reports, for the
    caller to scan (URBS: statuses route by their own fields; at most 64 per message).
    """

    def __init__(self, codepage: str, name_fields: Mapping[str, str],
                 deferred: Iterable[str], located: Iterable[str] = (),
                 path: Path = LIBRARY) -> None:
        self._args = (codepage, dict(name_fields), tuple(deferred), tuple(located), path)
        self._fn = _route_function(str(path))
        if self._fn is None:
            raise OSError(f"{path} is not built (make setup builds it with rustc)")
        table = LATIN1_TABLES.get(codepage)
        # form header bytes -> (big-endian, plan, table); EBCDIC needs a Latin-1 table
        self._forms = {
            head: (form.big, _plan(form.eyes, name_fields, deferred, located),
                   table if form.ebcdic else None)
            for head, form in FORMS.items() if table is not None or not form.ebcdic}
        self._many = _route_many_function(str(path))
        self._out = ctypes.create_string_buffer(_NAME_CAP)
        self._spans = (ctypes.c_uint32 * (2 * _STATUS_CAP))()
        self._counts = (ctypes.c_int64 * 2)()

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickled to Spark's Python workers as its arguments: the library loads there, and
        where it is not built the worker gets None (the Python scan), not a failed task."""
        return (load_router, self._args)

    def walk(self, data: bytes) -> Walked | None:
        """What routes ``data``; None: defer to the Python scan."""
        if type(data) is not bytes:
            data = bytes(data)
        if len(data) < MIN_HEADER:
            return None
        found = self._forms.get(data[:4] + data[8:12])
        if found is None:
            return None
        big, plan, table = found
        spans, counts = self._spans, self._counts
        n = self._fn(data, len(data), big, plan, len(plan), table, self._out, _NAME_CAP,
                     spans, 2 * _STATUS_CAP, counts)
        if n < 0:
            return None
        statuses = [(spans[2 * i], spans[2 * i + 1]) for i in range(counts[0])]
        return Walked(self._out.raw[:n].decode(ASCII_CODEC), statuses, counts[1])

    def walk_many(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
                  ) -> list[str | None]:
        """:meth:`walk` of many messages (message ``i`` is ``buf[starts[i]:ends[i]]``), one
        library call per form: the subscription of each message without a status (as
        ``walk(...).subscription``), None for the others (walk those alone: a status routes by
        its own fields; or the library defers)."""
        n = len(starts)
        out: list[str | None] = [None] * n
        if self._many is None or not n:
            return out
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        starts, ends = (np.ascontiguousarray(a, dtype=np.int64) for a in (starts, ends))
        index, keys = form_heads(buf, starts, ends)
        names: dict[bytes, str] = {}
        for head, (big, plan, table) in self._forms.items():
            chosen = index[keys == HEAD_KEYS[head]]
            if not len(chosen):
                continue
            m = len(chosen)
            first, last = starts[chosen], ends[chosen]
            found = np.empty(m * _NAME_CAP, dtype=np.uint8)
            lens = np.empty(m, dtype=np.int64)
            if self._many(buf.ctypes.data, len(buf), first.ctypes.data, last.ctypes.data, m,
                          big, plan, len(plan), table, found.ctypes.data, _NAME_CAP,
                          lens.ctypes.data) != m:
                continue
            raw = found.tobytes()
            for j in np.nonzero(lens >= 0)[0].tolist():
                name = raw[j * _NAME_CAP:j * _NAME_CAP + int(lens[j])]
                text = names.get(name)
                if text is None:
                    text = names[name] = name.decode(ASCII_CODEC)
                out[int(chosen[j])] = text
        return out


def _chains_function(path: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """The columnar walk's entry point (see urbwalk.rs), or None when it is not built."""
    lib = _library(path)
    if lib is None:
        return None
    fn = lib.urbwalk_chains
    p = ctypes.c_void_p
    fn.argtypes = [p, ctypes.c_size_t, ctypes.c_size_t, p, p, p, p, p, p, p, p,
                   ctypes.c_size_t, p, p, p, p, ctypes.c_size_t]
    fn.restype = ctypes.c_int64
    return fn


class ChainWalker:
    """Every message's element chain at once, for the columnar reader
    (``pipeline.reassembly.columnar._walk``): the same four arrays as its numpy walk, in one
    pass over the bytes instead of one numpy step per element position (~300 for a 13 KB
    message). None where the library declines (the numpy walk runs then)."""

    def __init__(self, codes: np.ndarray, kinds: np.ndarray, ebcdic: np.ndarray,
                 path: Path = LIBRARY) -> None:
        self._args = (codes, kinds, ebcdic, path)
        self._fn = _chains_function(str(path))
        if self._fn is None:
            raise OSError(f"{path} is not built (make setup builds it with rustc)")
        self._codes = np.ascontiguousarray(codes, dtype=np.uint32)
        self._kinds = np.ascontiguousarray(kinds, dtype=np.int64)
        self._ebcdic = np.ascontiguousarray(ebcdic, dtype=np.uint8)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (load_chain_walker, self._args)

    def __call__(self, buf: np.ndarray, pos: np.ndarray, end: np.ndarray, ok: np.ndarray,
                 big: np.ndarray, ebcdic: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """(message, offset, kind, length) per element; clears ``ok`` of broken chains."""
        n = len(pos)
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        pos_, end_ = (np.ascontiguousarray(a, dtype=np.int64) for a in (pos, end))
        big_, ebc_ = (np.ascontiguousarray(a, dtype=np.uint8) for a in (big, ebcdic))
        walked = ok.astype(np.uint8)  # a copy: ``ok`` changes only if the walk succeeds
        head = (buf.ctypes.data, len(buf), n, pos_.ctypes.data, end_.ctypes.data,
                walked.ctypes.data, big_.ctypes.data, ebc_.ctypes.data,
                self._codes.ctypes.data, self._kinds.ctypes.data, self._ebcdic.ctypes.data,
                len(self._codes))
        count = self._fn(*head, None, None, None, None, 0)  # counts only
        if count < 0:
            return None
        room = max(count, 1)  # the second pass also clears ``ok`` of broken chains
        outs = [np.empty(room, dtype=np.int64) for _ in range(4)]
        if self._fn(*head, *(o.ctypes.data for o in outs), room) != count:
            return None
        ok[:] = walked.astype(bool)
        return outs[0][:count], outs[1][:count], outs[2][:count], outs[3][:count]


def load_chain_walker(codes: np.ndarray, kinds: np.ndarray, ebcdic: np.ndarray,
                      path: Path = LIBRARY) -> ChainWalker | None:
    """A walker, or None where the library is not built (the numpy walk runs alone)."""
    try:
        return ChainWalker(codes, kinds, ebcdic, path)
    except OSError:
        return None


def load_router(codepage: str, name_fields: Mapping[str, str], deferred: Iterable[str],
                located: Iterable[str] = (),
                path: Path = LIBRARY) -> NativeRouter | None:
    """A router, or None where the library is not built (the Python scan runs alone)."""
    try:
        return NativeRouter(codepage, name_fields, deferred, located, path)
    except OSError:
        return None
