"""The batch writer's count of a batch's output rows (``batch_writer.count_tables``): the
direct writer's way (each row's table name to the driver, one stage) and Spark's (counted by
the executors) give the same counts, metrics rows and file descriptions."""

from __future__ import annotations

import json

from pipeline.spark.land.batch_writer import count_tables
from pipeline.spark.land.datafiles import FILES_TABLE
from pipeline.spark.land.tables import OUTPUT_DDL, STATS_TABLE


def test_both_ways_of_counting_agree(spark) -> None:
    rows = ([("gaps", json.dumps({"gap_id": i}), None) for i in range(3)]
            + [("quarantine", json.dumps({"reason": "bad"}), b"\x00" * 10)] * 5
            + [(STATS_TABLE, json.dumps({"subscription": s, "bytes": n}), None)
               for s, n in (("COLOR", 10), ("EMPLOYEE", 20))]
            + [(FILES_TABLE, json.dumps({"table": "images", "path": f"p{i}"}), None)
               for i in range(4)])
    frame = spark.createDataFrame(rows, OUTPUT_DDL).repartition(3)
    few = count_tables(frame, few_rows=True)
    many = count_tables(frame, few_rows=False)
    assert few[0] == many[0] == {"gaps": 3, "quarantine": 5}
    key = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
    assert sorted(few[1], key=key) == sorted(many[1], key=key)
    assert {r["subscription"] for r in few[1]} == {"COLOR", "EMPLOYEE"}
    assert sorted(r["path"] for r in few[2]) == sorted(r["path"] for r in many[2]) \
        == ["p0", "p1", "p2", "p3"]


def test_an_empty_batch_counts_nothing(spark) -> None:
    empty = spark.createDataFrame([], OUTPUT_DDL)
    assert count_tables(empty, few_rows=True) == ({}, [], []) == count_tables(empty)
