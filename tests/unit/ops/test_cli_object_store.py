"""Every ``urbpipe`` command that reads the lake, on an ``s3a://`` lake and checkpoint (moto's S3
server): each reaches the store through the conf's ``object_store`` (endpoint, path-style
addressing) with the environment's credentials — never AWS's defaults or instance metadata —
and the ops tables (gap_acks, quarantine_acks) are written there too."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipeline.config import Settings, load_settings
from pipeline.objectstore import access, pyarrow_path
from pipeline.ops.lake import Lake
from pipeline.spark.land.tables import arrow_schema
from tests.conftest import S3Server
from tests.unit.ops.conftest import at, gap_row, transaction

ROOT = Path(__file__).resolve().parents[3]
CONF = """
kafka: {{bootstrap_servers: "127.0.0.1:1"}}
topics: {{outputs: {{urb.out1: OUT1}}, replies: urb.replies, requests: urb.requests}}
subscriptions: [{{name: COLOR, destinations: [OUT1]}}]
stream: {{lake_dir: "{root}/lake", checkpoint_dir: "{root}/ck"}}
object_store: {{endpoint: "{endpoint}", path_style_access: true}}
"""


@pytest.fixture
def s3_conf(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    root = f"s3a://{s3_server.bucket}/cli-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "s3.yaml"
    path.write_text(CONF.format(root=root, endpoint=s3_server.endpoint))
    settings = load_settings(path, env={**s3_server.env})
    write = _writer(settings)
    write("transactions", [transaction("COLOR", 1), transaction("COLOR", 2, landed=11)])
    write("gaps", [gap_row("COLOR", 5, "unrecoverable", 9)])
    write("status_events", [{"destination": "OUT1", "subscription": "COLOR", "st": "SUBS",
                             "tsnr": 2, "received_at": at(12)}])
    write("quarantine", [{"source": "decode", "destination": "OUT1", "subscription": "COLOR",
                          "reason": "bad eye-catcher", "topic": "urb.out1", "partition": 0,
                          "offset": 7, "quarantined_at": at(3)}])
    write("file_status", [{"dbid": 10006, "fnr": 4, "status": "stale", "version": 1,
                           "stale_kinds": "load", "since": at(4)}])
    fs = access(settings).filesystem()
    ck = pyarrow_path(settings.location(settings.stream.checkpoint_dir))
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1000, "conf": {}})
    for folder, text in (("offsets", f'v1\n{meta}\n{{"urb.out1": {{"0": 40}}}}'),
                         ("commits", 'v1\n{"nextBatchWatermarkMs":0}')):
        with fs.open_output_stream(f"{ck}/{folder}/3") as out:
            out.write(text.encode())
    return path


def _writer(settings: Settings) -> Callable[[str, list[dict[str, Any]]], None]:
    lake = Lake(settings)

    def write(table: str, rows: list[dict[str, Any]]) -> None:
        schema = arrow_schema(table)
        full = [{name: row.get(name) for name in schema.names} for row in rows]
        write_deltalake(lake.path(table), pa.Table.from_pylist(full, schema=schema),
                        mode="append", storage_options=lake.options)

    return write


#: Runs each command line it reads (JSON) with ``urbpipe``'s main; prints each's exit code
#: and output (JSON).
_DRIVER = """
import contextlib, io, json, sys
from pipeline.ops.cli import main
for argv in json.loads(sys.stdin.read()):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    print(json.dumps([code, out.getvalue()]), flush=True)
"""


def run_all(*commands: list[str]) -> list[tuple[int, str]]:
    """The commands as an operator runs them, one after the other, in a process of their own
    (in this one, delta-rs calls that hold the GIL would wait for ever on the S3 server's
    thread): each one's exit code and output."""
    done = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(commands),
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = [tuple(json.loads(line)) for line in done.stdout.splitlines()]
    assert len(results) == len(commands), done.stderr
    return results  # type: ignore[return-value]


def test_every_lake_command_reads_the_object_store(s3_conf: Path) -> None:
    conf = ["--conf-file", str(s3_conf)]
    (status, gaps, ack, gaps_after, quarantine, q_ack, q_after, replay, inst, files,
     maintain) = run_all(
        ["status", "--no-kafka", "--json", *conf], ["gaps", "list", *conf],
        ["gaps", "ack", "OUT1/COLOR/1:5", "--by", "ops", *conf], ["gaps", "list", *conf],
        ["quarantine", "list", *conf], ["quarantine", "ack", "urb.out1[0]@7", "--by", "ops",
                                        *conf],
        ["quarantine", "list", *conf], ["quarantine", "replay", "--dry-run", *conf],
        ["initial-state", "list", *conf], ["files", *conf],
        ["maintain", "--dry-run", "--tables", "transactions,records", *conf])
    assert status[0] == 1, status  # the unrecoverable gap, not acknowledged
    report = json.loads(status[1])
    (key,) = report["keys"]
    assert (key["last_tsnr"], key["last_status"]["st"]) == (2, "SUBS")
    assert report["checkpoint_batch"] == 3  # the checkpoint on s3a:// too
    assert (gaps[0], ack[0], gaps_after[0]) == (1, 0, 0)  # gap_acks written to the store
    assert (quarantine[0], q_ack[0]) == (1, 0)
    assert q_after == (0, "quarantine is empty\n")
    assert (replay[0], inst[0]) == (0, 0)
    assert files[0] == 1 and "10006/4: STALE (load)" in files[1]
    assert maintain[0] == 0 and "records: no such table yet" in maintain[1]
