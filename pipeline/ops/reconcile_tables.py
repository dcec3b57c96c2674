"""The two Delta tables ``urbpipe reconcile`` writes beside the job's: their DDL, what each
table and column means (the data dictionary renders them, ``pipeline.ops.dictionary``), and
their Arrow schemas (``pipeline.spark.land.tables.ddl_arrow_schema``)."""

from __future__ import annotations

from pipeline.spark.land.dictionary import Doc
from pipeline.spark.land.tables import ddl_arrow_schema

RESULTS = "reconciliation"
PROOFS = "verified_through"
_FILE = "round string, subscription string, dbid int, fnr int"
DDL = {
    RESULTS: (f"{_FILE}, isn bigint, verdict string, fields array<string>, reason string, "
              "lake_version_time timestamp, answer_time timestamp, repaired boolean, "
              "checked_at timestamp"),
    PROOFS: (f"{_FILE}, full boolean, isns bigint, drift bigint, unanswered bigint, "
             "verified_through timestamp, checked_at timestamp, cycle string, last_isn bigint, "
             "cycle_done boolean, equal boolean, first_read timestamp"),
}
MEANING = {
    RESULTS: "One row per ISN a reconciliation round (`urbpipe reconcile`, or the job's own "
             "rounds: `reconcile.every_minutes`) compared with Adabas, with its verdict "
             "(README, \"Proving the lake equals Adabas\"; decision 0018).",
    PROOFS: "One row per file and reconciliation round: what the round found, and the file's "
            "`verified_through` when the round completed a cycle in which every ISN was equal "
            "or repaired.",
}
_D = Doc
COLUMNS: dict[str, Doc] = {
    "round": _D("The round's request token (RCN and 5 characters): the URBTRTOK of its INST "
                "requests, and of the answers' transactions."),
    "subscription": _D("Subscription of the file compared."),
    "dbid": _D("Database of the file compared."),
    "fnr": _D("File number."),
    "isn": _D("The ISN compared."),
    "verdict": _D("'match', 'differs' (see fields), 'missing_in_lake' (Adabas has the record, "
                  "the lake no row), 'extra_in_lake' (the replicator answered response 113: no "
                  "such ISN; the lake has a row) or 'unanswered' (see reason)."),
    "fields": _D("With 'differs': the value columns whose values differed; empty otherwise."),
    "reason": _D("With 'unanswered': why (no answer in time, the watermark did not pass the "
                 "read, the lake row is newer than the read).", "when not unanswered"),
    "lake_version_time": _D("Commit time of the lake's state the answer was compared with (the "
                            "row read before asking, or a change landed since).",
                            "when the lake had no row, or unanswered"),
    "answer_time": _D("When the replicator read the record (URBRTIME of the answer).",
                      "when unanswered without an answer"),
    "repaired": _D("The row drifted and the job's landing of the answer repaired it (its "
                   "version is now the answer's or newer)."),
    "checked_at": _D("When the round recorded its verdicts (UTC, the command's clock)."),
    "full": _D("A full round (every ISN the lake knows, or the next part of a cycle)."),
    "isns": _D("ISNs the round compared for the file."),
    "drift": _D("ISNs found differs, missing_in_lake or extra_in_lake."),
    "unanswered": _D("ISNs left unanswered."),
    "verified_through": _D("Every ISN of the file was compared and found equal (or repaired) "
                           "up to this time, on the database's clock: the earliest read of the "
                           "cycle this round completed.", "unless the round completed an equal "
                           "cycle"),
    "cycle": _D("A full round: the token of its cycle's first round.", "not a full round"),
    "last_isn": _D("The highest ISN the round compared."),
    "cycle_done": _D("A full round: it reached the last ISN the lake knew, completing its "
                     "cycle.", "not a full round"),
    "equal": _D("Every ISN of the round matched, or its drift was repaired."),
    "first_read": _D("The earliest read of the round's answers.", "no answer"),
}
RESULT_SCHEMA = ddl_arrow_schema(DDL[RESULTS])
PROOF_SCHEMA = ddl_arrow_schema(DDL[PROOFS])
