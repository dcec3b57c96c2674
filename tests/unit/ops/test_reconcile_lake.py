"""What ``urbpipe reconcile`` reads from real Delta tables (delta-rs, no Spark): rows and
tombstones, the changes landed since, the answers of a round (a 113 from ``records``, values from
``changes_``; an older answer or one whose image has not landed is left out), the watermark;
and the CLI's exit codes and help."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from pipeline import errors
from pipeline.config import Layout, Settings
from pipeline.ops import reconcile_lake as rl
from pipeline.ops.lake import Lake
from pipeline.ops.reconcile_cli import exit_code
from pipeline.ops.reconcile_cmd import FileRound, Options, RoundResult
from pipeline.reconciliation.verdicts import Verdict
from pipeline.spark.land.tables import table_path
from tests.unit.ops.conftest import WriteTable

ROOT = Path(__file__).resolve().parents[3]
T = datetime(2026, 11, 29, 8)
LAY = Layout(subscription="COLOR", dbid=10006, fnr=4, format_buffer="AA,16,A.",
             columns={"AA": "color"})
FILES = rl.FileTables(LAY)
TS = pa.timestamp("us")
TS_UTC = pa.timestamp("us", tz="UTC")  # what the job's tables hold (direct writer: naive)


def s(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def _write(settings: Settings, table: str, rows: list[dict], schema: pa.Schema) -> None:
    write_deltalake(table_path(settings, table), pa.Table.from_pylist(rows, schema),
                    mode="append")


CURRENT = pa.schema([("isn", pa.int64()), ("color", pa.string()), ("deleted", pa.bool_()),
                     ("verified", pa.bool_()), ("epoch", pa.int32()), ("tsnr", pa.int64()),
                     ("rsnr", pa.int64()), ("commit_time", TS), ("origin", pa.string()),
                     ("batch_id", pa.int64())])
CHANGES = pa.schema([("isn", pa.int64()), ("record_type", pa.string()),
                     ("image_type", pa.string()), ("epoch", pa.int32()), ("tsnr", pa.int64()),
                     ("rsnr", pa.int64()), ("commit_time", TS_UTC), ("color", pa.string()),
                     ("origin", pa.string()), ("batch_id", pa.int64())])
STONES = pa.schema([("isn", pa.int64()), ("epoch", pa.int32()), ("tsnr", pa.int64()),
                    ("rsnr", pa.int64()), ("commit_time", TS)])


def _current(isn: int, color: str, at: float, tsnr: int = 1, deleted: bool = False,
             batch: int = 1) -> dict:
    return {"isn": isn, "color": color, "deleted": deleted, "verified": True, "epoch": 1,
            "tsnr": tsnr, "rsnr": 1, "commit_time": s(at), "origin": "live", "batch_id": batch}


def _change(isn: int, rt: str, it: str, at: float, color: str | None, tsnr: int = 0,
            origin: str = "live", batch: int = 1) -> dict:
    return {"isn": isn, "record_type": rt, "image_type": it, "epoch": 1, "tsnr": tsnr,
            "rsnr": 1, "commit_time": s(at), "color": color, "origin": origin,
            "batch_id": batch}


def _record(isn: int, at: float, rsp: int = 0, sub: str = "COLOR", fnr: int = 4) -> dict:
    return {"subscription": sub, "destination": "OUT1", "epoch": 1, "tsnr": 0, "rsnr": 1,
            "fnr": fnr, "isn": isn, "type": "R", "rsp": rsp, "record_time": s(at)}


def test_rows_tombstones_changes_and_fields(ops_settings: Settings) -> None:
    lake = Lake(ops_settings)
    _write(ops_settings, FILES.current, [_current(1, "RED", 1),
                                         _current(2, "BLUE", 2, batch=2)], CURRENT)
    _write(ops_settings, FILES.tombstones, [{"isn": 3, "epoch": 1, "tsnr": 4, "rsnr": 1,
                                             "commit_time": s(3)}], STONES)
    _write(ops_settings, FILES.changes, [
        _change(1, "U", "B", 5, "RED", 7, batch=3), _change(1, "U", "A", 5, "GREEN", 7, batch=3),
        _change(2, "D", "B", 6, "BLUE", 8, batch=4), _change(2, "I", "A", 0.5, "OLD", 1)],
        CHANGES)
    assert rl.value_fields(lake, FILES) == ["color"]
    assert rl.known_isns(lake, FILES) == {1, 2, 3}
    rows = rl.lake_rows(lake, FILES, [1, 2, 3, 4], ["color"])
    assert rows[1].values == {"color": "RED"} and rows[1].version == (s(1), 1, 1, 1)
    assert rows[3].deleted and rows[3].version[0] == s(3) and 4 not in rows
    _, applied = rl.read_state(lake, FILES, [1], ["color"])
    assert applied == 2, "the newest batch whose MERGE the current_ read holds"
    landed = rl.landed_changes(lake, FILES, [1, 2], applied, ["color"])
    assert [(c.deleted, dict(c.values)) for c in landed[1]] == [(False, {"color": "GREEN"})]
    assert [c.deleted for c in landed[2]] == [True], "a delete; batch 1 was in the lake read"
    assert set(rl.landed_changes(lake, FILES, [1, 2], 3, ["color"])) == {2}


def test_answers_of_the_round_only(ops_settings: Settings, write_table: WriteTable) -> None:
    lake = Lake(ops_settings)
    write_table("records", [_record(1, 10), _record(1, 4), _record(2, 11, rsp=113),
                            _record(3, 12), _record(5, 13, sub="EMPLOYEE"),
                            _record(5, 13, fnr=9)])
    _write(ops_settings, FILES.changes, [
        _change(1, "R", "A", 10, "NEW", origin="reconcile"),
        _change(1, "R", "A", 4, "OLDER", origin="initial_state"),
        _change(1, "U", "A", 10, "LIVE", tsnr=9)], CHANGES)
    got = rl.answers(lake, FILES, {1: s(5), 2: s(5), 3: s(5), 5: s(5)}, ["color"])
    assert got[1].found and got[1].values == {"color": "NEW"} and got[1].version[0] == s(10)
    assert not got[2].found
    assert 3 not in got, "its image has not landed in changes_ yet"
    assert 5 not in got, "another subscription's or file's record is not an answer"
    assert rl.answers(lake, FILES, {1: s(10)}, ["color"]) == {}, "read before the floor"


def test_watermark_earliest_over_destinations_and_open_gaps(ops_settings: Settings,
                                                           write_table: WriteTable) -> None:
    lake = Lake(ops_settings)
    assert rl.watermark(lake, "COLOR", 10006).passed(s(99)), "nothing landed: nothing missing"
    row = {"subscription": "COLOR", "dbid": 10006, "nucleus_lag_ms": 0}
    write_table("watermarks", [
        {**row, "destination": "OUT1", "watermark": s(5), "open_gaps": 1, "computed_at": s(1)},
        {**row, "destination": "OUT1", "watermark": s(20), "open_gaps": 1,
         "computed_at": s(2)},
        {**row, "destination": "OUT2", "watermark": s(15), "open_gaps": 0,
         "computed_at": s(2)}])
    mark = rl.watermark(lake, "COLOR", 10006)
    assert (mark.watermark, mark.open_gaps) == (s(15), 1)
    assert mark.passed(s(15)) and not mark.passed(s(16))


def _result(*names: str) -> RoundResult:
    fr = FileRound(LAY, list(range(len(names))), full=True)
    fr.verdicts = [Verdict(i, n) for i, n in enumerate(names)]  # type: ignore[arg-type]
    return RoundResult("RCNTEST1", [fr], T, 1)


def test_only_a_full_round_proves_the_file() -> None:
    full, sample = _result("match", "match"), _result("match", "match")
    sample.files[0].full = False
    for fr in (full.files[0], sample.files[0]):
        fr.verdicts = [Verdict(v.isn, v.verdict, answer_version=(T, 1, 0, 1))
                       for v in fr.verdicts]
    assert full.files[0].verified_through() == T
    assert sample.files[0].verified_through() is None


def test_exit_codes() -> None:
    assert exit_code(_result("match", "match")) == errors.OK
    assert exit_code(_result("match", "unanswered")) == errors.PROBLEMS
    assert exit_code(_result("unanswered", "extra_in_lake")) == errors.DRIFT


def test_help_documents_options_and_exit_codes() -> None:
    out = subprocess.run([sys.executable, "-m", "pipeline.ops.cli", "reconcile", "--help"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    for word in ("--full", "--isns", "--sample", "--file", "--timeout", "verified_through",
                 f"{errors.DRIFT}  drift found", "reconcile.max_isns_per_request"):
        assert word in out, word


def test_no_file_to_check_is_a_usage_error(conf_file: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pipeline.ops.cli", "--conf-file",
                           str(conf_file), "reconcile"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == errors.USAGE, done.stderr
    assert "no file to check" in done.stderr


def test_round_alerts(ops_settings: Settings) -> None:
    from pipeline.ops.reconcile_alerts import DRIFT, REPAIRED, round_alerts

    result = _result(*["match"] * 397, "differs", "missing_in_lake", "extra_in_lake")
    fr = result.files[0]
    fr.repaired = {397, 398, 399}
    (info,) = round_alerts(ops_settings, "RCNTEST1", [fr], now=T)
    assert (info["kind"], info["severity"], info["subscription"]) == (REPAIRED, "info", "COLOR")
    assert info["idempotency_key"] == f"{REPAIRED}|RCNTEST1|COLOR/10006/4"
    assert info["details"]["differs"] == [397] and info["details"]["not_repaired"] == []
    assert "repaired 3 row(s)" in info["message"]
    fr.repaired = {397, 398}
    kinds = {a["kind"]: a for a in round_alerts(ops_settings, "RCNTEST1", [fr], now=T)}
    assert kinds[DRIFT]["severity"] == "warning" and "1 drifted row(s) not repaired" in \
        kinds[DRIFT]["message"] and kinds[DRIFT]["details"]["not_repaired"] == [399]
    many = _result("match", "differs")
    many.files[0].repaired = {1}
    (a, b) = round_alerts(ops_settings, "RCNTEST2", many.files, now=T)
    assert (a["kind"], b["kind"]) == (REPAIRED, DRIFT) and "50.0% of the ISNs" in b["message"]
    assert round_alerts(ops_settings, "RCNTEST3", _result("match", "unanswered").files) == []


def test_capped_full_rounds_make_a_cycle_that_proves_the_file(ops_settings: Settings) -> None:
    """reconcile.full_round_isns 2 over five ISNs: three full rounds, each after the previous
    one's last ISN (read back from ``verified_through``); the third completes the cycle and
    proves the file through the cycle's earliest read; the fourth starts a new cycle."""
    import random

    from pipeline.ops.reconcile_cmd import plan, record
    from pipeline.ops.reconcile_tables import PROOFS

    settings = ops_settings.model_copy(update={"reconcile": ops_settings.reconcile.model_copy(
        update={"full_round_isns": 2})})
    lake = Lake(settings)
    _write(settings, FILES.current, [_current(i, "RED", 1) for i in (1, 2, 3, 4, 5)], CURRENT)
    options = Options(full=True)
    seen = []
    for n, token in enumerate(("RCNAAAAA", "RCNBBBBB", "RCNCCCCC", "RCNDDDDD")):
        fr = plan(lake, settings, LAY, options, random.Random(0), token)
        read = (s(10 - n), 1, 0, 1)
        fr.verdicts = [Verdict(i, "match", answer_version=read) for i in fr.isns]
        seen.append((fr.isns, fr.cycle, fr.done, fr.verified_through()))
        record(lake, RoundResult(token, [fr], T, 1))
    assert seen == [([1, 2], "RCNAAAAA", False, None), ([3, 4], "RCNAAAAA", False, None),
                    ([5], "RCNAAAAA", True, s(8)), ([1, 2], "RCNDDDDD", False, None)]
    proofs = scan_rows(lake, PROOFS)
    assert [p["cycle_done"] for p in proofs] == [False, False, True, False]


def scan_rows(lake: Lake, table: str) -> list[dict]:
    rows = rl.scan(lake, table)
    assert rows is not None
    return sorted(rows.to_pylist(), key=lambda r: r["round"])
