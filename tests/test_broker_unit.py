"""Local broker helpers that need no broker."""

from __future__ import annotations

from pipeline.ops.broker import new_cluster_id


def test_cluster_ids_never_look_like_an_option() -> None:
    ids = [new_cluster_id() for _ in range(3000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)
