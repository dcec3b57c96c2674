"""A batch's records and images per configured file (``pipeline.typed.batch_rows``), on
hand-made Arrow tables: records whose file has no typed image, and files of several
databases in one subscription."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.typed.batch_rows import RECORD_ROW, file_batches

T = datetime(2026, 11, 28, tzinfo=UTC)


def _tx(tsnr: int, dbid: int) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr,
            "dbid": dbid, "commit_time": T, "origin": "live", "landed_at": T}


def _rec(tsnr: int, isn: int, fnr: int = 4) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr,
            "rsnr": 1, "fnr": fnr, "isn": isn, "type": "U", "rsp": 0, "record_time": None,
            "dcnt": 1}


def _img(tsnr: int, image_type: str) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr,
            "rsnr": 1, "dsnr": 1, "image_type": image_type, "payload": b"RED",
            "acode": 0, "wcode": 0, "arc": 0}


RECORD_TYPES = {"record_time": pa.timestamp("us", "UTC")}
IMAGE_TYPES = {"payload": pa.binary()}


def _schema(like: dict, types: dict[str, pa.DataType]) -> pa.Schema:
    base = pa.Table.from_pylist([{k: v for k, v in like.items() if v is not None}]).schema
    fields = [base.field(k) if k in base.names else pa.field(k, types[k]) for k in like]
    return pa.schema([pa.field(f.name, types.get(f.name, f.type)) for f in fields])


def _batches(txs: list[dict], recs: list[dict], imgs: list[dict], files) -> list:
    return list(file_batches(pa.Table.from_pylist(txs, schema=_schema(_tx(0, 0), {})),
                             pa.Table.from_pylist(recs, schema=_schema(_rec(0, 0),
                                                                       RECORD_TYPES)),
                             pa.Table.from_pylist(imgs, schema=_schema(_img(0, "A"),
                                                                       IMAGE_TYPES)),
                             files))


def test_records_without_a_typed_image_give_their_file_no_images_and_no_error() -> None:
    """A resent record may carry no after or before image at all (a key image only)."""
    got = _batches([_tx(1, 10006)], [_rec(1, 7)], [_img(1, "K")], [("COLOR", 10006, 4)])
    assert [(b.key, b.records.num_rows, b.images.num_rows) for b in got] == [
        (("COLOR", 10006, 4), 1, 0)]


def test_a_file_of_another_database_is_not_the_configured_one() -> None:
    """Files are (dbid, fnr): fnr 4 on 10007 is not the configured fnr 4 on 10006."""
    txs = [_tx(1, 10007), _tx(2, 10006)]
    recs, imgs = [_rec(1, 7), _rec(2, 8)], [_img(1, "A"), _img(2, "A")]
    assert _batches(txs, recs[:1], imgs[:1], [("COLOR", 10006, 4)]) == []
    got = _batches(txs, recs, imgs, [("COLOR", 10006, 4), ("COLOR", 10007, 4)])
    assert sorted((b.key, b.records.column("isn").to_pylist(), b.images.num_rows)
                  for b in got) == [(("COLOR", 10006, 4), [8], 1),
                                    (("COLOR", 10007, 4), [7], 1)]
    for b in got:  # an image's record row counts from its own file's first record
        rows = b.records.column("isn").take(b.images.column(RECORD_ROW))
        assert rows.to_pylist() == b.images.column("isn").to_pylist()


def test_initial_state_pseudo_transactions_pair_by_occurrence_among_live_ones() -> None:
    """Each initial-state pseudo-transaction has tsnr 0 and rsnr 1 again: the n-th tsnr-0
    transaction of the batch goes with the n-th tsnr-0 record and image, whatever live
    transactions come between them (only tsnr-0 rows are counted)."""
    def initial(isn: int, read_at: datetime) -> tuple[dict, dict, dict]:
        return ({**_tx(0, 10006), "origin": "initial_state", "commit_time": read_at},
                {**_rec(0, isn), "type": "R", "record_time": read_at},
                {**_img(0, "A"), "payload": f"I{isn}".encode()})

    first, second = initial(10, T.replace(hour=1)), initial(20, T.replace(hour=2))
    live = (_tx(5, 10006), _rec(5, 30), _img(5, "A"))
    rows = [first, live, second]
    got = _batches(*[[r[i] for r in rows] for i in range(3)], [("COLOR", 10006, 4)])
    assert len(got) == 1
    recs, imgs = got[0].records, got[0].images
    assert sorted(zip(recs.column("isn").to_pylist(), recs.column("occ").to_pylist(),
                      recs.column("commit_time").to_pylist(), strict=True)) == [
        (10, 1, T.replace(hour=1)), (20, 2, T.replace(hour=2)), (30, 1, T)]
    assert sorted(zip(imgs.column("isn").to_pylist(), imgs.column("payload").to_pylist(),
                      strict=True)) == [(10, b"I10"), (20, b"I20"), (30, b"RED")]


# -- pseudo-transactions whose records differ in number and in images -------------------------

def _pseudo(n: int, answers: list[tuple[int, bool]], origin: str = "initial_state",
            dbid: int = 10006) -> tuple[list[dict], list[dict], list[dict]]:
    """The n-th pseudo-transaction: records (ISN, found) numbered from rsnr 1; a found one
    has its after image (payload ``I<isn>``), one answered 113 none."""
    read = T.replace(hour=n)
    tx = {**_tx(0, dbid), "origin": origin, "commit_time": read}
    recs, imgs = [], []
    for rsnr, (isn, found) in enumerate(answers, start=1):
        recs.append({**_rec(0, isn), "type": "R", "rsnr": rsnr, "record_time": read,
                     "rsp": 0 if found else 113, "dcnt": 1 if found else 0})
        if found:
            imgs.append({**_img(0, "A"), "rsnr": rsnr, "payload": f"I{isn}".encode()})
    return [tx], recs, imgs


def _joined(*pseudos: tuple[list[dict], list[dict], list[dict]]) -> tuple[pa.Table, pa.Table]:
    txs = [r for p in pseudos for r in p[0]]
    recs = [r for p in pseudos for r in p[1]]
    imgs = [r for p in pseudos for r in p[2]]
    got = _batches(txs, recs, imgs, [("COLOR", 10006, 4)])
    assert len(got) == 1
    return got[0].records, got[0].images


def test_an_answer_113_does_not_pass_the_next_pseudo_transactions_image_to_its_isn() -> None:
    """Found by urbpipe reconcile: counting images per rsnr handed the second
    pseudo-transaction's rsnr-1 image to the first one's rsnr-1 record, answered 113."""
    recs, imgs = _joined(_pseudo(1, [(59, False), (62, True)]),
                         _pseudo(2, [(80, True), (82, True)]))
    pairs = sorted(zip(imgs.column("isn").to_pylist(), imgs.column("payload").to_pylist(),
                       strict=True))
    assert pairs == [(62, b"I62"), (80, b"I80"), (82, b"I82")]
    assert sorted(recs.column("isn").to_pylist()) == [59, 62, 80, 82]


def test_records_join_their_own_pseudo_transaction_whatever_its_size() -> None:
    """A one-record pseudo-transaction before a three-record one: rsnr 2 and 3 belong to the
    second (its origin and read time), not to a first occurrence of their rsnr."""
    recs, _ = _joined(_pseudo(1, [(10, True)], origin="initial_state"),
                      _pseudo(2, [(20, True), (21, False), (22, True)], origin="reconcile"))
    got = sorted(zip(recs.column("isn").to_pylist(), recs.column("origin").to_pylist(),
                     recs.column("commit_time").to_pylist(), strict=True))
    assert got == [(10, "initial_state", T.replace(hour=1)),
                   (20, "reconcile", T.replace(hour=2)), (21, "reconcile", T.replace(hour=2)),
                   (22, "reconcile", T.replace(hour=2))]


def test_images_that_do_not_line_up_with_their_records_join_none() -> None:
    """A record claiming two images with one landed: no image is guessed onto an ISN."""
    txs, recs, imgs = _pseudo(1, [(5, True), (6, True)])
    recs[0]["dcnt"] = 2
    _, got = _joined((txs, recs, imgs))
    assert got.num_rows == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=6), min_size=1, max_size=6),
       st.integers(0, 3))
def test_every_image_joins_its_own_records_isn(shapes: list[list[bool]], live_at: int) -> None:
    """Any number of pseudo-transactions, each with any mix of found and 113 answers, with a
    live transaction among them: each image lands on its own ISN, each record on its own
    pseudo-transaction's read time."""
    isn = iter(range(100, 1000))
    pseudos = [_pseudo(n, [(next(isn), found) for found in shape])
               for n, shape in enumerate(shapes, start=1)]
    live = ([_tx(5, 10006)], [_rec(5, 30)], [_img(5, "A")])
    pseudos.insert(min(live_at, len(pseudos)), live)
    recs, imgs = _joined(*pseudos)
    for isn_, payload in zip(imgs.column("isn").to_pylist(), imgs.column("payload").to_pylist(),
                             strict=True):
        assert payload == (b"RED" if isn_ == 30 else f"I{isn_}".encode())
    found = sum(f for shape in shapes for f in shape) + 1
    assert imgs.num_rows == found
    by_row = recs.column("isn").take(imgs.column(RECORD_ROW))  # each image's own record
    assert by_row.to_pylist() == imgs.column("isn").to_pylist()
    hours = {r["isn"]: r["commit_time"] for r in recs.to_pylist()}
    for n, shape in enumerate(shapes, start=1):
        first = 100 + sum(len(s) for s in shapes[:n - 1])
        assert {hours[i] for i in range(first, first + len(shape))} == {T.replace(hour=n)}
