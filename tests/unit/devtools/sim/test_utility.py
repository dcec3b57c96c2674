"""Utility/lifecycle statuses from the simulator: conf and CLI forms, real bytes in both
encodings, their place in the stream, and what the job reads from them (engine-free path:
decode stage → state machine → ``status_events`` → ``pipeline.typed.lifecycle``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from devtools.sim import Replicator, SimConfig, default_config, load_config, read_messages
from devtools.sim.__main__ import main
from devtools.sim.utility import UtilityEvent, parse_spec
from pipeline.typed.lifecycle import Action, interpret
from pipeline.urb import decode_message
from tests.support.harness import Harness

REFRESH = "3:AUTI:COLOR:4:refresh_file"
WIDEN = "5:AUTI:EMPLOYEE:9:change_field_length:fieldname=AS,newlength=7"


def _config(*specs: str, encoding: str = "ebcdic"):
    events = tuple(parse_spec(s) for s in specs)
    base = default_config().with_encoding(encoding).model_dump()
    return SimConfig.model_validate({**base, "utility_events": events, "c5_rate": 0.0})


def _statuses(deliveries) -> list[tuple[str, object]]:
    """(topic, URBS element) of every status message, in send order."""
    out = []
    for d in deliveries:
        topic, msg = d.topic, decode_message(d.value)
        out += [(topic, e) for e in msg.elements if e.eye == "URBS"]
    return out


# ------------------------------------------------------------------ parsing
def test_spec_forms() -> None:
    refresh = parse_spec(REFRESH)
    assert (refresh.at, refresh.status, refresh.subscription, refresh.fnr, refresh.utility) == (
        3, "AUTI", "COLOR", 4, 0x48)
    widen = parse_spec(WIDEN)
    assert widen.utility == 0x41 and widen.detail == {"fieldname": "AS", "newlength": 7}
    assert parse_spec("10:lods:COLOR:4").status == "LODS"
    assert parse_spec("12:RPLS:ORDERS:::files=20+21").files == (20, 21)
    assert parse_spec("1:AUTI:COLOR:4:0x44:status=S").utility == 0x44


@pytest.mark.parametrize(("spec", "message"), [
    ("3:AUTI:COLOR:4", "AUTI needs a utility"),
    ("3:LODS:COLOR:4:refresh_file", "only AUTI takes one"),
    ("3:XXXX:COLOR:4", "unknown status"),
    ("3:AUTI:COLOR:4:format_disk", "unknown utility"),
    ("3:AUTI:COLOR:4:refresh_file:fieldname=AA", "has no detail"),
    ("3:LODS:COLOR:4::files=4", "RPLS/RPLE only"),
    ("3:LODS:COLOR:4:::files=4", "expected AT:STATUS:SUBSCRIPTION"),
    ("3:AUTI", "expected AT:STATUS:SUBSCRIPTION"),
])
def test_bad_specs_say_what_is_wrong(spec, message) -> None:
    with pytest.raises(ValueError, match=message):
        parse_spec(spec)


def test_config_checks_subscription_and_file() -> None:
    with pytest.raises(ValidationError, match="unknown subscription"):
        _config("3:LODS:NOPE:4")
    with pytest.raises(ValidationError, match="not one of COLOR's files"):
        _config("3:LODS:COLOR:5")


# ------------------------------------------------------------------ the stream
@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_auti_bytes_in_both_forms(encoding: str) -> None:
    rep = Replicator(_config(REFRESH, WIDEN, encoding=encoding), seed=4)
    statuses = _statuses(rep.run(8))
    auti = [(t, e) for t, e in statuses if e.urbsst == "AUTI"]
    color = [e for t, e in auti if e.urbssnam == "COLOR"]
    employee = [e for t, e in auti if e.urbssnam == "EMPLOYEE"]
    assert len(color) == 1 and color[0].urbsfnr == 4 and color[0].urbsdbid == 10006
    assert color[0].detail.urbsutyp == 0x48
    assert len(employee) == 2, "one per destination of EMPLOYEE (OUT1, OUT2)"
    assert {(e.detail.fieldname, e.detail.newlength) for e in employee} == {("AS", 7)}
    assert color[0].urbsttim and color[0].urbsttim == color[0].urbstime


def test_status_goes_between_the_transactions_before_and_after_it() -> None:
    rep = Replicator(_config("3:LODS:COLOR:4"), seed=4)
    out = rep.start()
    for _ in range(6):
        out += rep.step()
    out += rep.terminate()
    order = []  # (kind, commit STCK) for COLOR on urb.out1, in send order
    for d in out:
        if d.topic != "urb.out1":
            continue
        for e in decode_message(d.value).elements:
            if e.eye == "URBT" and e.urbtsnam == "COLOR":
                order.append(("T", e.urbtttim))
            elif e.eye == "URBS" and e.urbssnam == "COLOR":
                order.append(("S", e.urbsttim))
    assert [k for k, _ in order].count("S") == 1
    times = [t for _, t in order]
    assert times == sorted(times), "the status's commit time orders it among the transactions"


def test_refresh_empties_the_simulated_file() -> None:
    rep = Replicator(_config("0:AUTI:COLOR:4:refresh_file"), seed=4)
    assert len(rep.generator.file("COLOR", 4)) == 100
    rep.start()
    rep.step()
    records = rep.generator.file("COLOR", 4)
    assert len(records) <= 8, "only what the first transaction after the refresh inserted"
    assert set(records.values) <= set(range(1, 9)), "ISNs start at 1 again"


# ------------------------------------------------------------------ conf and CLI
def test_yaml_key(tmp_path: Path) -> None:
    conf = tmp_path / "sim.yaml"
    conf.write_text("""
destinations: [{name: OUT1, topic: urb.out1}]
subscriptions:
  - {name: COLOR, destinations: [OUT1], dbid: 10006, files: [4],
     layout: [{name: AA, format: A, length: 8}]}
utility_events:
  - {at: 2, status: AUTI, subscription: COLOR, fnr: 4, utility: rename_file,
     detail: {filename: COLOURS}}
  - {at: 4, status: RPLS, subscription: COLOR, files: [4]}
""")
    config = load_config(conf)
    assert config.utility_events == (
        UtilityEvent(at=2, status="AUTI", subscription="COLOR", fnr=4, utility=0x4B,
                     detail={"filename": "COLOURS"}),
        UtilityEvent(at=4, status="RPLS", subscription="COLOR", files=(4,)))
    statuses = _statuses(Replicator(config, seed=1).run(6))
    assert [e.detail.filename for _, e in statuses if e.urbsst == "AUTI"] == ["COLOURS"]
    assert [e.files for _, e in statuses if e.urbsst == "RPLS"] == [[4]]


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_cli_flag(tmp_path: Path, encoding: str) -> None:
    out = tmp_path / "run.urb"
    code = main(["--out", str(out), "--transactions", "10", "--seed", "3", "--encoding",
                 encoding, "--utility-event", REFRESH, "--utility-event", "6:LODE:COLOR:4"])
    assert code == 0
    msgs = [decode_message(m) for m in read_messages(out)]
    sts = [e.urbsst for m in msgs for e in m.elements if e.eye == "URBS"]
    assert sts.count("AUTI") == 1 and sts.count("LODE") == 1
    assert {m.ebcdic for m in msgs} == {encoding == "ebcdic"}


def test_cli_refuses_a_bad_spec(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--out", "/dev/null", "--utility-event", "3:AUTI:COLOR:4"])
    assert exit_.value.code == 2
    assert "AUTI needs a utility" in capsys.readouterr().err


# ------------------------------------------------------------------ what the job reads
@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_the_job_reads_the_actions_from_landed_status_events(encoding: str) -> None:
    specs = (REFRESH, WIDEN, "4:LODS:COLOR:4", "6:LODE:COLOR:4", "7:RPLS:ORDERS:::files=20+21")
    harness = Harness(Replicator(_config(*specs, encoding=encoding), seed=9))
    harness.feed(harness.replicator.run(10))
    harness.drain()
    big = True if encoding == "ebcdic" else None
    events = [e for r in harness.rows("status_events") if (e := interpret(r, big)) is not None]
    seen = {(e.subscription, e.st, e.action, e.files) for e in events}
    assert seen == {
        ("COLOR", "AUTI", Action.TRUNCATE, (4,)),
        ("EMPLOYEE", "AUTI", Action.WIDEN, (9,)),
        ("COLOR", "LODS", Action.MARK_STALE, (4,)),
        ("COLOR", "LODE", Action.CLEAR_STALE, (4,)),
        ("ORDERS", "RPLS", Action.MARK_STALE, (20, 21)),
    }
    widen = next(e for e in events if e.action is Action.WIDEN)
    assert widen.detail == {"fieldname": "AS", "newlength": 7}
    refresh = next(e for e in events if e.action is Action.TRUNCATE)
    assert refresh.at is not None and refresh.at.tzinfo is not None
