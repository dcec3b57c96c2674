"""The test and benchmark S3 server (devtools/s3_emulator.py): its indexed ListObjectsV2
answers what moto's own answers, page by page, for any keys, prefix, delimiter, start key and
page size; and it counts the requests it serves by operation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools import s3_emulator
from devtools.s3_emulator import operation

BUCKET = "emulator-test"
#: names over a small alphabet, so that prefixes, folders and start keys collide often
NAMES = st.text(alphabet="ab/.0", min_size=1, max_size=6)


@pytest.fixture(scope="module")
def emulator() -> Iterator[s3_emulator.Emulator]:
    with s3_emulator.running(buckets=(BUCKET,)) as emu:
        yield emu


@pytest.fixture(scope="module")
def client(emulator: s3_emulator.Emulator) -> Any:
    return emulator.client()


def _pages(client: Any, **request: Any) -> list[tuple[list[str], list[str]]]:
    """Every page of a listing: its keys and its common prefixes."""
    pages = []
    while True:
        page = client.list_objects_v2(Bucket=BUCKET, **request)
        pages.append(([o["Key"] for o in page.get("Contents", [])],
                      [p["Prefix"] for p in page.get("CommonPrefixes", [])]))
        if not page.get("IsTruncated"):
            return pages
        request = {k: v for k, v in request.items() if k != "StartAfter"}
        request["ContinuationToken"] = page["NextContinuationToken"]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.sets(NAMES, max_size=25), prefix=st.one_of(st.just(""), NAMES),
       delimiter=st.sampled_from([None, "/"]), after=st.one_of(st.none(), NAMES),
       page=st.integers(1, 8))
def test_indexed_listing_is_motos(emulator: s3_emulator.Emulator, client: Any,
                                  keys: set[str], prefix: str, delimiter: str | None,
                                  after: str | None, page: int) -> None:
    store = emulator.bucket(BUCKET).keys
    for name in list(dict.keys(store)):
        store.pop(name)
    for name in keys:
        client.put_object(Bucket=BUCKET, Key=name, Body=b"x")
    assert list(getattr(store, "_urbpipe_index", [])) == sorted(keys)
    request: dict[str, Any] = {"Prefix": prefix, "MaxKeys": page}
    if delimiter:
        request["Delimiter"] = delimiter
    if after is not None:
        request["StartAfter"] = after
    indexed = _pages(client, **request)
    index = getattr(store, "_urbpipe_index", None)
    store._urbpipe_index = None  # moto's own listing
    try:
        assert indexed == _pages(client, **request)
    finally:
        store._urbpipe_index = index


def test_it_counts_requests_by_operation(emulator: s3_emulator.Emulator, client: Any) -> None:
    before = emulator.snapshot()
    client.put_object(Bucket=BUCKET, Key="counted/one", Body=b"x")
    client.head_object(Bucket=BUCKET, Key="counted/one")
    client.get_object(Bucket=BUCKET, Key="counted/one")["Body"].read()
    client.list_objects_v2(Bucket=BUCKET, Prefix="counted/")
    got = emulator.snapshot() - before
    assert got == {"PUT": 1, "HEAD": 1, "GET": 1, "LIST": 1}


def test_operation_names() -> None:
    assert operation("GET", "/b?list-type=2&prefix=x%2F") == "LIST"
    assert operation("GET", "/b/") == "LIST"
    assert operation("GET", "/b/k?partNumber=1") == "GET"
    assert operation("GET", "/b?location") == "GET"
    assert operation("HEAD", "/b/k") == "HEAD"
