"""The catalog's clients in processes of their own, for an end-to-end run: ``urbpipe catalog``
commands (sync, serve) and beeline, the JDBC client pyspark ships; and what a run waits for
before it asks them (every watermark at its database's newest commit), read without Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from pipeline.config import Settings

ROOT = Path(__file__).resolve().parents[2]
BEELINE = ROOT / ".venv" / "bin" / "beeline"


class Command:
    """A ``urbpipe`` command in its own process group, its output in a log file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline.ops.cli", *args], cwd=ROOT, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def name(self) -> str:
        return " ".join(self.proc.args[3:5])

    def said(self, text: str) -> bool:
        return self.log.exists() and text in self.log.read_text(errors="replace")

    def wait_said(self, text: str, timeout_s: float) -> None:
        """Until the log says ``text``; fails at once if the command exited."""
        deadline = time.monotonic() + timeout_s
        while not self.said(text):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} never said {text!r} "
                                     f"(exit {self.proc.poll()}):\n{self.tail()}")
            time.sleep(0.5)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGINT (the command's own stop), SIGKILL to its group if that does not end it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


def beeline(settings: Settings, statements: list[tuple[str, str]]) -> dict[str, list[list[str]]]:
    """Run the statements in one beeline session against ``urbpipe catalog serve``; each
    one's rows (tab-separated cells) by its label."""
    script = "".join(f"SELECT '=== {label}';\n{sql};\n" for label, sql in statements)
    sql = settings.catalog.sql_server
    done = subprocess.run(
        [str(BEELINE), "-u", f"jdbc:hive2://{sql.host}:{sql.port}/default", "-n", "analyst",
         "--silent=true", "--showHeader=false", "--outputformat=tsv2", "-e", script],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out: dict[str, list[list[str]]] = {}
    label = None
    for line in done.stdout.splitlines():
        if line.startswith("=== "):
            label = line[4:]
            out[label] = []
        elif label is not None and line.strip():
            out[label].append(line.split("\t"))
    return out


def jdbc_time(text: str) -> datetime:
    """A timestamp as JDBC prints it (java.sql.Timestamp: 1 to 9 fraction digits)."""
    day, _, fraction = text.partition(".")
    return datetime.fromisoformat(f"{day}.{(fraction or '0')[:6].ljust(6, '0')}")


def watermarks_whole(lake: Path) -> bool:
    """Every (subscription, dbid) with transactions has its watermark at its newest commit
    less 1 µs (no gap, nucleus lag 0): the batches' last commits are done."""
    from deltalake import DeltaTable

    if not (lake / "watermarks" / "_delta_log" / f"{1:020d}.json").exists():
        return False
    newest: dict[tuple[str, int], datetime] = {}
    txs = DeltaTable(str(lake / "transactions")).to_pyarrow_table(
        columns=["subscription", "dbid", "commit_time", "initial_state"]).to_pylist()
    for t in txs:
        if not t["initial_state"]:
            key = (t["subscription"], t["dbid"])
            newest[key] = max(newest.get(key, t["commit_time"]), t["commit_time"])
    marks: dict[tuple[str, int], datetime] = {}
    for m in DeltaTable(str(lake / "watermarks")).to_pyarrow_table(
            columns=["subscription", "dbid", "watermark"]).to_pylist():
        if m["watermark"] is not None:
            key = (m["subscription"], m["dbid"])
            marks[key] = max(marks.get(key, m["watermark"]), m["watermark"])
    return bool(newest) and all(marks.get(k) == v - timedelta(microseconds=1)
                                for k, v in newest.items())
