"""The command line as external checks use it, and the load-mode driver."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.sim import LoadOptions, MemorySink, Replicator, default_config, drive, read_messages
from devtools.sim.__main__ import main
from pipeline.urb import decode_message
from tests.support.oracle import Oracle, normalise
from tests.support.streams import Received, rebuild

ROOT = Path(__file__).resolve().parents[4]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools.sim", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read(path: Path) -> list[Received]:
    return [Received("", None, len(m), decode_message(m)) for m in read_messages(path)]


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_cli_out_file(tmp_path: Path, encoding: str) -> None:
    out = tmp_path / "run.urb"
    args = [
        "--out",
        str(out),
        "--transactions",
        "120",
        "--seed",
        "4",
        "--max-message-size",
        "800",
        "--encoding",
        encoding,
    ]
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    received = read(out)
    assert received[0].status == "STRT"
    assert all(r.size <= 800 for r in received)
    assert all(r.message.ebcdic == (encoding == "ebcdic") for r in received)
    assert all(r.message.big_endian == (encoding == "ebcdic") for r in received)
    starts = {
        (e.urbtsnam, e.urbttsnr) for r in received for e in r.message.elements if e.eye == "URBT"
    }
    assert len(starts) == 120
    again = tmp_path / "again.urb"
    assert cli(*[a if a != str(out) else str(again) for a in args]).returncode == 0
    assert again.read_bytes() == out.read_bytes()


def test_cli_file_is_length_prefixed(tmp_path: Path) -> None:
    out = tmp_path / "run.urb"
    assert main(["--out", str(out), "--transactions", "5"]) == 0
    data = out.read_bytes()
    length = int.from_bytes(data[:4], "big")
    assert decode_message(data[4 : 4 + length]).header.urbhlent == length
    assert sum(4 + len(m) for m in read_messages(out)) == len(data)


def test_cli_faults_and_help(tmp_path: Path) -> None:
    out = tmp_path / "f.urb"
    assert (
        main(
            [
                "--out",
                str(out),
                "--transactions",
                "80",
                "--restarts",
                "1",
                "--wrap",
                "--max-message-size",
                "600",
            ]
        )
        == 0
    )
    assert "REST" in {r.status for r in read(out)}
    help_text = cli("--help").stdout
    for flag in (
        "--out",
        "--kafka",
        "--serve",
        "--rate",
        "--drop-transactions",
        "--wrap",
        "--encoding",
        "--max-message-size",
        "--seed",
        "--config",
        "--key",
        "--redeliveries",
        "--redelivery-max",
        "--stalls",
        "--stall-seconds",
        "--tod-utc-offset",
        "--tod-leap-seconds",
        "--lifecycle-names-destination",
    ):
        assert flag in help_text
    assert "no Kafka key" in help_text and "sleeps" in help_text


def test_cli_connector_flags(tmp_path: Path) -> None:
    from devtools.sim.__main__ import _config, _faults, build_parser

    args = build_parser().parse_args([
        "--out", "x", "--key", "msgid", "--redeliveries", "2", "--redelivery-max", "10",
        "--stalls", "1", "--stall-seconds", "1.5", "--lifecycle-names-destination",
        "--fault-rate", "redeliver=0.1"])
    config, plan = _config(args), _faults(args)
    assert (config.kafka_key, config.redelivery_max_messages, config.stall_ms,
            config.lifecycle_names_destination) == ("msgid", 10, 1500, True)
    assert plan.counts == {"redeliver": 2, "stall": 1} and plan.rates == {"redeliver": 0.1}
    default = _config(build_parser().parse_args(["--out", "x"]))
    assert (default.kafka_key, default.redelivery_max_messages, default.stall_ms,
            default.lifecycle_names_destination) == ("none", 2000, 600_000, False)
    plain, again = tmp_path / "plain.urb", tmp_path / "again.urb"
    assert main(["--out", str(plain), "--transactions", "50"]) == 0
    assert main(["--out", str(again), "--transactions", "50", "--redeliveries", "3"]) == 0
    copies = list(read_messages(again))
    assert len(copies) > len(list(read_messages(plain)))
    assert list(dict.fromkeys(copies)) == list(read_messages(plain)), "copies only"


def test_cli_config_file_takes_the_transport_keys(tmp_path: Path) -> None:
    """The YAML keys config.py documents for the transport and the clock."""
    from devtools.sim.config import load_config

    conf = tmp_path / "sim.yaml"
    conf.write_text(
        "destinations:\n  - {name: D1, topic: t.d1}\n"
        "subscriptions:\n  - name: S1\n    destinations: [D1]\n    dbid: 7\n    files: [3]\n"
        "    layout: [{name: AA, format: A, length: 10}]\n"
        "kafka_key: none\nlifecycle_names_destination: true\nredelivery_max_messages: 5\n"
        "stall_ms: 1000\ntod_utc_offset: \"-03:00\"\ntod_leap_seconds: 0\n",
        encoding="utf-8",
    )
    config = load_config(conf)
    assert (config.kafka_key, config.lifecycle_names_destination,
            config.redelivery_max_messages, config.stall_ms) == ("none", True, 5, 1000)
    assert config.tod_offset_us == -3 * 3600 * 1_000_000


def test_cli_rejects_too_small_messages(tmp_path: Path) -> None:
    done = cli("--out", str(tmp_path / "x"), "--max-message-size", "200")
    assert done.returncode == 2 and "max message size" in done.stderr


def test_cli_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "sim.yaml"
    conf.write_text(
        "destinations:\n  - {name: D1, topic: t.d1}\n"
        "subscriptions:\n  - name: S1\n    destinations: [D1]\n    dbid: 7\n    files: [3]\n"
        "    encoding: ascii\n    images: after\n"
        "    layout: [{name: AA, format: A, length: 10}, {name: AB, format: P, length: 3}]\n",
        encoding="utf-8",
    )
    out = tmp_path / "c.urb"
    assert main(["--out", str(out), "--config", str(conf), "--transactions", "10"]) == 0
    received = read(out)
    assert not received[0].message.ebcdic
    txs = rebuild(r for r in received if r.first.eye != "URBS")
    assert list(txs) == ["S1"] and len(txs["S1"]) == 10


def test_load_mode_progress_and_final_count() -> None:
    rep = Replicator(default_config(), 1)
    sink, stream = MemorySink(), io.StringIO()
    summary = drive(rep, sink, LoadOptions(transactions=300, progress=True), stream=stream)
    assert summary.transactions == 300 and summary.messages == len(sink.deliveries)
    assert "sim: 300 tx" in stream.getvalue()
    assert "300 transactions" in summary.line()


def test_load_mode_rate_is_roughly_kept() -> None:
    rep = Replicator(default_config(), 1)
    summary = drive(rep, MemorySink(), LoadOptions(transactions=40, rate=200.0))
    assert 0.15 < summary.seconds < 2.0


def test_load_mode_answers_requests_while_running() -> None:
    from pipeline.urb import requests

    class Queue:
        def __init__(self) -> None:
            self.pending = [requests.stat("COLOR", rnam="REPLY")]

        def poll(self, timeout: float) -> list[bytes]:
            out, self.pending = self.pending, []
            return out

        def close(self) -> None:
            pass

    rep, sink = Replicator(default_config(), 1), MemorySink()
    summary = drive(rep, sink, LoadOptions(transactions=20, rate=500.0), Queue())
    assert summary.requests == 1
    subs = [decode_message(d.value).elements[0] for d in sink.deliveries
            if d.topic == "urb.replies"]
    assert any(e.eye == "URBS" and e.urbsst == "SUBS" and e.urbssnam == "COLOR" for e in subs)



def test_cli_json_summary(tmp_path: Path) -> None:
    done = cli("--out", str(tmp_path / "j.urb"), "--transactions", "10", "--json")
    assert json.loads(done.stdout)["transactions"] == 10


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_adapya_oracle_reads_the_same_fields(encoding: str) -> None:
    """Software AG's own DSECT maps decode what the simulator wrote to the same values."""
    cfg = default_config().with_encoding(encoding).model_copy(update={"max_message_size": 700})
    oracle = Oracle(ebcdic=encoding == "ebcdic", big_endian=encoding == "ebcdic")
    for d in Replicator(cfg, 2).run(15):
        ours = decode_message(d.value)
        theirs = oracle.decode(d.value)
        assert [eye for eye, _ in theirs] == ["URBH", *[e.eye for e in ours.elements]]
        for el, (_, fields) in zip(ours.elements, theirs[1:], strict=True):
            for name, value in el.fields.items():
                if name in fields:
                    theirs_value = fields[name]
                    if isinstance(theirs_value, bytearray):
                        theirs_value = bytes(theirs_value)
                    assert normalise(theirs_value) == value, (el.eye, name)
