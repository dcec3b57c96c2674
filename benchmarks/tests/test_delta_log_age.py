"""How benchmarks/delta_log_age.py ages a log: the real versions moved up, the ones below
filled, contiguous, with a checkpoint every 50 and ``_last_checkpoint`` moved with them."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.delta_log_age import CHECKPOINT_INTERVAL, age_log, retained


def _real_log(log: Path, newest: int) -> None:
    """What a local table of versions 0..newest leaves (its checkpoint at 50)."""
    log.mkdir()
    for v in range(newest + 1):
        for name in (f"{v:020d}.json", f"{v:020d}.crc", f".{v:020d}.json.crc",
                     f".{v:020d}.crc.crc"):
            (log / name).write_text(f"{v}")
    (log / f"{50:020d}.checkpoint.parquet").write_text("cp")
    (log / f".{50:020d}.checkpoint.parquet.crc").write_text("cp")
    (log / "_last_checkpoint").write_text('{"version":50,"size":3,"checksum":"ab"}')
    (log / "._last_checkpoint.crc").write_text("old")


def test_days_of_commits_at_the_default_trigger() -> None:
    assert retained(0) == 0 and retained(1) == 17_280
    assert retained(30) == retained(365) == 518_400  # the log keeps 30 days


def test_the_aged_log_is_contiguous_and_reads_from_the_moved_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    _real_log(log, 60)
    filler = 1000
    files = age_log(log, filler)
    commits = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    assert commits == list(range(filler + 61))
    assert files == (filler + 61) * 4 + 2 * (filler // CHECKPOINT_INTERVAL) + 1
    assert json.loads((log / "_last_checkpoint").read_text()) == {"version": filler + 50,
                                                                  "size": 3}
    assert not (log / "._last_checkpoint.crc").exists()
    assert (log / f"{filler + 60:020d}.json").read_text() == "60"  # the real ones, moved
    assert (log / f"{7:020d}.json").read_text() == "1"  # a filler: version 1's commit
    checkpoints = sorted(int(p.name[:20]) for p in log.glob("*.checkpoint.parquet"))
    assert checkpoints == [*range(50, filler, 50), filler + 50]


def test_past_the_links_per_file_a_copy_carries_on(tmp_path: Path, monkeypatch) -> None:
    """ext4 allows 65,000 links per file; a 30-day log needs 518,400 of one commit."""
    import errno
    import os

    from benchmarks import delta_log_age

    link = os.link

    def limited(source: Path, target: Path) -> None:
        if Path(source).stat().st_nlink >= 3:
            raise OSError(errno.EMLINK, "Too many links")
        link(source, target)

    monkeypatch.setattr(delta_log_age.os, "link", limited)
    log = tmp_path / "_delta_log"
    _real_log(log, 60)
    age_log(log, 200)
    commits = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    assert commits == list(range(261))
    assert all((log / f"{v:020d}.json").read_text() == "1" for v in range(200))
    assert max(p.stat().st_nlink for p in log.iterdir()) <= 3


def test_an_s3_log_is_aged_the_same_way_in_the_emulators_bucket() -> None:
    """Two keys per commit (S3A writes no Hadoop checksums); ``_last_checkpoint`` rewritten
    through a request, so its etag and checksum are its new text's."""
    from benchmarks.delta_log_age import age_s3_log
    from devtools import s3_emulator

    with s3_emulator.running(buckets=("aged",)) as emulator:
        client = emulator.client()
        for v in range(61):
            for suffix in (".json", ".crc"):
                client.put_object(Bucket="aged", Key=f"t/_delta_log/{v:020d}{suffix}",
                                  Body=f"{v}".encode())
        client.put_object(Bucket="aged", Key=f"t/_delta_log/{50:020d}.checkpoint.parquet",
                          Body=b"cp")
        client.put_object(Bucket="aged", Key="t/_delta_log/_last_checkpoint",
                          Body=b'{"version":50,"size":3,"checksum":"ab"}')
        filler = 1000
        keys = age_s3_log(emulator, "aged", "t/_delta_log", filler)
        assert keys == (filler + 61) * 2 + filler // CHECKPOINT_INTERVAL + 1
        listed = [o["Key"][len("t/_delta_log/"):] for page in
                  client.get_paginator("list_objects_v2").paginate(
                      Bucket="aged", Prefix="t/_delta_log/") for o in page["Contents"]]
        assert sorted(int(n[:20]) for n in listed if n.endswith(".json")) == list(
            range(filler + 61))
        assert sorted(int(n[:20]) for n in listed if n.endswith(".checkpoint.parquet")) == [
            *range(50, filler, 50), filler + 50]
        read = client.get_object(Bucket="aged", Key="t/_delta_log/_last_checkpoint")
        assert json.loads(read["Body"].read()) == {"version": filler + 50, "size": 3}
        moved = client.get_object(Bucket="aged", Key=f"t/_delta_log/{filler + 60:020d}.json")
        assert moved["Body"].read() == b"60"
        filled = client.get_object(Bucket="aged", Key=f"t/_delta_log/{7:020d}.json")
        assert filled["Body"].read() == b"1"
