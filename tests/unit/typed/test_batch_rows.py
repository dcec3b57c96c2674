"""A batch's records and images per configured file (``pipeline.typed.batch_rows``), on
hand-made Arrow tables: records whose file has no typed image, and files of several
databases in one subscription."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from pipeline.typed.batch_rows import file_batches

T = datetime(2026, 11, 28, tzinfo=UTC)


def _tx(tsnr: int, dbid: int) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr,
            "dbid": dbid, "commit_time": T, "origin": "live", "landed_at": T}


def _rec(tsnr: int, isn: int, fnr: int = 4) -> dict:
    return {"subscription": "COLOR", "destination": "OUT1", "epoch": 1, "tsnr": tsnr,
            "rsnr": 1, "fnr": fnr, "isn": isn, "type": "U", "rsp": 0, "record_time": None}


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
