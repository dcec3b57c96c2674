"""The compiled routing scan (pipeline/urb/native) routes every message as the Python scan does.

The library answers plain messages only and defers the rest; a wrong answer would send a
message's elements to a key that does not land them. So the decode stage's routes with the
library and without it must be equal on every message: generated in any form and code page,
the simulator's streams, mutated seeds (broken lengths, flipped bytes) and random bytes. The
library must be built here (``make setup`` builds it): otherwise these tests would compare
Python with itself, so they fail instead of skipping.
"""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.bench_state import stream
from pipeline.arrow_bytes import binary_spans
from pipeline.reassembly.routing import Covered
from pipeline.spark.engine.decode_stage import RecordDecoder
from pipeline.urb import encode_message, make_element
from pipeline.urb.native import LIBRARY, load_router
from tests.support.harness import CONTROL_TOPIC, decoder_for
from tests.unit.urb.conftest import SEED_FILES, load
from tests.unit.urb.test_fuzz import _extra_seeds, _mutate
from tests.unit.urb.test_properties import CODEPAGES, SETTINGS, elements, headers

COVERED = {"OUT1": [Covered("COLOR", frozenset({(10006, 4)}))]}


def decoders(codepage: str = "cp037") -> tuple[RecordDecoder, RecordDecoder]:
    """(with the library, Python only), configured alike."""
    args = ({"t": "OUT1"}, "OUT1", codepage)
    kwargs = {"home_destinations": {"COLOR": "OUT1"}, "covered": COVERED}
    return (RecordDecoder(*args, **kwargs),
            RecordDecoder(*args, **kwargs, native_scan=False))


NATIVE, PYTHON = decoders()


def assert_same_routes(raw: bytes, native: RecordDecoder = NATIVE,
                       python: RecordDecoder = PYTHON) -> None:
    assert native.routes("t", None, raw) == python.routes("t", None, raw)


def test_the_library_is_built() -> None:
    assert LIBRARY.exists(), f"{LIBRARY} missing: make setup builds it (rustc)"
    assert NATIVE.native_scan and not PYTHON.native_scan


@SETTINGS
@given(header=headers, body=elements, big=st.booleans(), ebcdic=st.booleans(),
       codepage=st.sampled_from(CODEPAGES))
def test_any_message_in_any_form(header, body, big: bool, ebcdic: bool, codepage: str) -> None:
    raw = encode_message(header, body, ebcdic=ebcdic, big_endian=big, codepage=codepage)
    assert_same_routes(raw, *decoders(codepage))


@pytest.mark.parametrize("form", ["ebcdic", "ascii"])
def test_simulator_streams_are_answered_natively(form: str) -> None:
    """The common case is the library's: ≥ 90 % of a busy stream's messages, statuses (C5,
    the STRT) included, and every one routed alike."""
    rep, records = stream(form, 400, 12, 2, 0.05)
    native = decoder_for(rep.config)
    python = decoder_for(rep.config, native_scan=False)
    assert native.native_scan
    answered = 0
    for r in records:
        assert native.routes(r.topic, r.key, r.value) == python.routes(r.topic, r.key, r.value)
        answered += native._native.walk(r.value) is not None  # type: ignore[union-attr]
    assert answered >= 0.9 * len(records), (answered, len(records))


def test_names_blank_first_then_named() -> None:
    """The first URBT/URBC/URBE that names a subscription wins, blanks skipped, as in Python."""
    body = [make_element("URBT", urbtsnam="", urbttsnr=1),
            make_element("URBE", urbesnam="EMPL", urbetsnr=1),
            make_element("URBT", urbtsnam="COLOR", urbttsnr=2)]
    for ebcdic in (True, False):
        raw = encode_message(None, body, ebcdic=ebcdic, big_endian=ebcdic)
        walked = NATIVE._native.walk(raw)  # type: ignore[union-attr]
        assert walked is not None and walked.subscription == "EMPL"
        assert_same_routes(raw)


def test_mutated_and_random_messages() -> None:
    """30,000 mutated seeds (lengths clobbered, bytes flipped, cut, spliced) and 5,000 random
    tails behind a valid header prefix: the same routes, errors worded alike."""
    rng = random.Random(2611)
    seeds = [load(name) for name in SEED_FILES] + _extra_seeds()
    for _ in range(30_000):
        assert_same_routes(_mutate(rng, rng.choice(seeds)))
    for _ in range(5_000):
        seed = rng.choice(seeds)
        assert_same_routes(seed[:rng.randrange(4, 40)] + rng.randbytes(rng.randrange(80)))


def test_statuses_are_located_and_gffts_deferred() -> None:
    """A status routes by its own fields: the library says where it is, before or after the
    data elements; a message with a GFFT goes to the Python scan whole."""
    router = NATIVE._native
    assert router is not None
    strt, c5 = make_element("URBS", urbsst="STRT"), make_element("URBS", urbsst="C5DA",
                                                                    urbssnam="EMPL")
    urbt = make_element("URBT", urbtsnam="COLOR")
    for body, data_at in (([strt, urbt, c5], 1), ([urbt, c5], 0), ([strt, c5], -1)):
        raw = encode_message(None, body)
        walked = router.walk(raw)
        assert walked is not None and walked.data_at == data_at
        assert len(walked.statuses) == sum(el.eye == "URBS" for el in body)
        assert_same_routes(raw)
    raw = encode_message(None, [urbt, make_element("URBF", groups=[{"urbgidx": 1}])])
    assert router.walk(raw) is None
    assert_same_routes(raw)


def test_more_statuses_than_the_library_has_room_for() -> None:
    raw = encode_message(None, [make_element("URBS", urbsst="C5DA", urbssnam=f"S{i}")
                                for i in range(70)])
    assert NATIVE._native.walk(raw) is None  # type: ignore[union-attr]
    assert_same_routes(raw)


def test_pickled_to_a_worker(tmp_path: Path) -> None:
    """Spark pickles the decoder to its Python workers: the library loads there, and a worker
    without it gets the Python scan, not a failed task."""
    assert pickle.loads(pickle.dumps(NATIVE)).native_scan
    assert load_router("cp037", {"URBT": "urbtsnam"}, (), (), tmp_path / "none.so") is None
    router = decoders()[0]._native
    assert router is not None
    router._args = (*router._args[:-1], tmp_path / "none.so")  # as on a worker without it
    assert pickle.loads(pickle.dumps(router)) is None


def test_loaded_from_the_zip_spark_submit_ships(tmp_path: Path) -> None:
    """README's cluster recipe ships the package as a zip (``--py-files``): the library
    inside it is loaded from a copy, not lost to the Python scan."""
    archive = tmp_path / "pipeline.zip"
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(archive), "pipeline"],
                   cwd=root, check=True)
    probe = ("import pipeline.urb.native as n, pipeline.reassembly.columnar as c; "
             "print(n.__file__); print(n.load_router('cp037', {}, ()) is not None, "
             "c._NATIVE_WALK is not None)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(archive)}).stdout.split("\n")
    assert out[0].startswith(str(archive)), out  # imported from the zip, not the tree
    assert out[1] == "True True", out


def _batch(records: list[tuple], big: bool = False) -> Any:
    """An Arrow batch of Kafka records as Spark hands them to the decode stage (``big``:
    the value column as large_binary, which the stage also takes)."""
    import pyarrow as pa

    value = pa.large_binary() if big else pa.binary()
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("key", pa.binary()), ("value", value)])
    return pa.RecordBatch.from_pylist(
        [dict(zip(schema.names, r, strict=True)) for r in records], schema=schema)


def _rows_one_by_one(decoder: RecordDecoder, records: list[tuple]) -> list[dict]:
    """What the decode stage must emit for a batch, record by record (``rows``, then the
    batch's run and tick rows from each record's own ``scan_header``)."""
    from pipeline.spark.engine.decode_stage import ARROW_SCHEMA

    rows = [row for r in records for row in decoder.rows(*r)]
    rows += decoder.batch_rows([(t, p, o, v) for t, p, o, _k, v in records])
    return [{n: row[n] for n in ARROW_SCHEMA.names} for row in rows]


@pytest.mark.parametrize("form", ["ebcdic", "ascii"])
def test_a_batch_routes_as_its_records_one_by_one(form: str) -> None:
    """``route_batch`` walks the batch in one library call per form and the header fields
    with numpy: its rows are exactly the record-by-record rows, in order, for batches that
    mix plain messages, statuses, GFFTs, mutated and cut messages, empty and null values,
    control commands and another form's messages, at any slice offset, and without the
    library."""
    from pipeline.spark.engine.decode_stage import route_batch

    rep, records = stream(form, 300, 6, 7, 0.05)
    native = decoder_for(rep.config)
    python = decoder_for(rep.config, native_scan=False)
    topic = records[0].topic
    rng = random.Random(2911)
    seeds = [load(name) for name in SEED_FILES] + _extra_seeds()
    _, other = stream("ascii" if form == "ebcdic" else "ebcdic", 20, 3, 8)
    mixed: list[tuple] = []
    for r in records:
        mixed.append((r.topic, r.partition, r.offset, r.key, r.value))
        pick = rng.random()
        if pick < 0.05:
            mixed.append((topic, 0, r.offset, None, _mutate(rng, rng.choice(seeds))))
        elif pick < 0.07:
            mixed.append((topic, 0, r.offset, None, r.value[:rng.randrange(40)]))
        elif pick < 0.08:
            mixed.append((topic, 0, r.offset, None, rng.choice([None, b""])))
        elif pick < 0.09:
            mixed.append((CONTROL_TOPIC, 0, r.offset, None, rng.choice(
                [b'{"destination": "OUT1", "subscription": "COLOR"}', b"{bad", r.value])))
        elif pick < 0.10:
            mixed.append((topic, 0, r.offset, None, rng.choice(other).value))
    answered = sum(s is not None for s in native._native.walk_many(  # type: ignore[union-attr]
        *binary_spans(_batch(mixed).column("value"))))
    assert answered >= 0.8 * len(records), answered
    for start in (0, 1, 17):
        part = mixed[start:]
        want = _rows_one_by_one(python, part)
        assert any(row["part"] == -1 for row in want) and any(row["error"] for row in want)
        for decoder, big in ((native, False), (native, True), (python, False)):
            batch = _batch(mixed, big).slice(start)
            got = [row for b in route_batch(decoder, batch) for row in b.to_pylist()]
            assert got == want, (decoder.native_scan, big, start)
