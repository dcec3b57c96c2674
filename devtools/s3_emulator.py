"""An S3 server for the tests and benchmarks: moto's S3 in server mode, in a thread of this
process, reached over real HTTP by the JVM's S3A connector and by pyarrow like any store.

Three things are added to moto, each because a measurement or a client needs it:

- ``index``: moto answers a ListObjectsV2 by reading, filtering and sorting every key of the
  bucket, so on moto a LIST costs what the bucket holds. S3 keeps its keys in order and a LIST
  costs the page it returns; a benchmark of a log that grows (benchmarks/delta_log_age.py)
  would otherwise measure moto. The index is a sorted list of each bucket's key names, kept
  with the bucket's keys; ListObjectsV2 then walks from the prefix or start key and jumps over
  a common prefix's keys. Its answers are moto's (tests/unit/devtools/test_s3_emulator.py),
  but for the page size: S3 returns at most 1,000 keys per page whatever MaxKeys asks (S3A
  asks 5,000), and so does the index; moto returns as many as asked.
- ``counts``: the requests served, by operation (``LIST``, ``HEAD``, ``GET``, ``PUT``,
  ``DELETE``, ``POST``): what a commit costs on any S3, whatever this emulator's speed.
- no interim ``100 Continue`` (``no_interim_continue``): S3A uploads through the AWS SDK's
  Netty client, which sends the body at once and takes a late interim 100 for the final
  answer (aws-sdk-java-v2#1969); a server may leave it out (RFC 9110, 10.1.1).

``Emulator.bucket`` gives moto's own bucket object, for a benchmark that fills a bucket
faster than requests could (``put_key``, ``remove_key``).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: moto's default account, under which its server keeps every bucket
ACCOUNT = "123456789012"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "urbpipe-test", "AWS_SECRET_ACCESS_KEY": "urbpipe-test",
               "AWS_REGION": "us-east-1"}
_INDEX = "_urbpipe_index"
#: keys in one ListObjectsV2 page at most, on S3
S3_MAX_KEYS = 1000


@dataclass
class Emulator:
    """A running server: where it is, and the requests it served so far."""

    endpoint: str
    server: Any
    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self) -> Any:
        """A boto3 S3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint,
                            region_name=CREDENTIALS["AWS_REGION"],
                            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def bucket(self, name: str) -> Any:
        from moto.s3.models import s3_backends

        return s3_backends[ACCOUNT]["aws"].get_bucket(name)

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)


def operation(method: str, path: str) -> str:
    """The S3 operation of a request, as ``counts`` names it."""
    route, _, query = path.partition("?")
    on_bucket = route.strip("/").count("/") == 0
    if method == "GET" and on_bucket and (not query or "list-type=" in query
                                          or "prefix=" in query or "marker=" in query):
        return "LIST"
    return method


def no_interim_continue(run_wsgi: Callable[[Any], None]) -> Callable[[Any], None]:
    """moto's werkzeug handler without its interim 100 response (see the module's doc)."""

    def run(handler: Any) -> None:
        del handler.headers["Expect"]
        run_wsgi(handler)

    return run


def _counting(run_wsgi: Callable[[Any], None], emulator: Emulator) -> Callable[[Any], None]:
    def run(handler: Any) -> None:
        with emulator.lock:
            emulator.counts[operation(handler.command, handler.path)] += 1
        run_wsgi(handler)

    return run


def put_key(keys: Any, name: str, key: Any) -> None:
    """Store ``key`` under ``name`` in a bucket's keys without moto's request path."""
    key.name = name
    index = getattr(keys, _INDEX, None)
    if index is not None and not dict.__contains__(keys, name):
        index.add(name)
    dict.__setitem__(keys, name, [key])


def remove_key(keys: Any, name: str) -> Any:
    """Take ``name`` out of a bucket's keys and return its key (not disposed: a copy may
    share its buffer)."""
    index = getattr(keys, _INDEX, None)
    if index is not None:
        index.discard(name)
    return dict.pop(keys, name)[-1]


def names_under(keys: Any, prefix: str) -> list[str]:
    """The names of a bucket's keys that start with ``prefix``, in order (from the index)."""
    index = getattr(keys, _INDEX, None)
    if index is None:
        return sorted(n for n in dict.keys(keys) if n.startswith(prefix))
    found = []
    for name in index.irange(minimum=prefix):
        if not name.startswith(prefix):
            break
        found.append(name)
    return found


def renamed(key: Any, name: str) -> Any:
    """A shallow copy of a moto key under another name (its value shared, not copied)."""
    other = copy.copy(key)
    other.name = name
    return other


def _indexed_store() -> Callable[[], None]:
    """Keep a sorted index of names in every bucket's key store; returns the undo."""
    from moto.s3.utils import _VersionedKeyStore as Store
    from sortedcontainers import SortedList

    saved = {n: getattr(Store, n) for n in ("__setitem__", "setlist", "pop")}

    def index(store: Any) -> Any:
        found = getattr(store, _INDEX, None)
        if found is None:
            found = SortedList(dict.keys(store))
            setattr(store, _INDEX, found)
        return found

    def setitem(store: Any, key: str, value: Any) -> None:
        if not dict.__contains__(store, key):
            index(store).add(key)
        saved["__setitem__"](store, key, value)

    def setlist(store: Any, key: str, list_: Any) -> None:
        if not dict.__contains__(store, key):
            index(store).add(key)
        saved["setlist"](store, key, list_)

    def pop(store: Any, key: str) -> None:
        index(store).discard(key)
        saved["pop"](store, key)

    Store.__setitem__, Store.setlist, Store.pop = setitem, setlist, pop  # type: ignore[method-assign]

    def undo() -> None:
        for name, method in saved.items():
            setattr(Store, name, method)

    return undo


def _walk(bucket: Any, prefix: str, delimiter: str | None, after: str | None
          ) -> Iterator[Any]:
    """What ListObjectsV2 lists, in order, strictly after ``after``: keys (moto's objects)
    and common prefixes (strings), from the bucket's index."""
    from moto.s3.models import FakeDeleteMarker

    names = getattr(bucket.keys, _INDEX)
    start = max(prefix, after or "")
    while True:
        for name in names.irange(minimum=start):
            if not name.startswith(prefix):
                return
            if after is not None and name <= after:
                continue
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                folder = prefix + rest.split(delimiter, 1)[0] + delimiter
                if after is None or folder > after:
                    yield folder
                # every name under the folder sorts before this one: jump there
                start = folder[:-1] + chr(ord(delimiter[-1]) + 1) if len(delimiter) == 1 \
                    else folder + "\U0010ffff"
                break
            key = bucket.keys.get(name)
            if key is not None and not isinstance(key, FakeDeleteMarker):
                yield key
        else:
            return


def _indexed_listing() -> Callable[[], None]:
    """ListObjectsV2 from the index (see the module's doc); returns the undo."""
    from moto.s3.models import S3Backend

    original = S3Backend.list_objects_v2

    def list_objects_v2(self: Any, bucket: Any, prefix: str | None, delimiter: str | None,
                        continuation_token: str | None, start_after: str | None,
                        max_keys: int) -> Any:
        if getattr(bucket.keys, _INDEX, None) is None:
            return original(self, bucket, prefix, delimiter, continuation_token,
                            start_after, max_keys)
        after = (self._pagination_tokens.get(continuation_token) if continuation_token
                 else start_after) or None
        max_keys = min(max_keys, S3_MAX_KEYS)
        found: list[Any] = []
        for item in _walk(bucket, prefix or "", delimiter, after):
            found.append(item)
            if len(found) > max_keys:
                break
        return self._truncate_result(found, max_keys)

    S3Backend.list_objects_v2 = list_objects_v2  # type: ignore[method-assign]

    def undo() -> None:
        S3Backend.list_objects_v2 = original  # type: ignore[method-assign]

    return undo


@contextmanager
def running(*, index: bool = True, buckets: tuple[str, ...] = ()) -> Iterator[Emulator]:
    """Start moto's S3 on a free port of 127.0.0.1 with the buckets; stop it after."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    original = MotoRequestHandler.run_wsgi
    undo = [_indexed_store(), _indexed_listing()] if index else []
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    emulator = Emulator("", server)
    MotoRequestHandler.run_wsgi = _counting(  # type: ignore[method-assign]
        no_interim_continue(original), emulator)
    server.start()
    host, port = server.get_host_and_port()
    emulator.endpoint = f"http://{host}:{port}"
    try:
        for name in buckets:
            emulator.create_bucket(name)
        yield emulator
    finally:
        server.stop()
        MotoRequestHandler.run_wsgi = original  # type: ignore[method-assign]
        for step in undo:
            step()
