"""Every STCK the simulator writes is machine time (seed 001, "About Output Message Time
Stamps": "may or may not be the local time"; a TOD clock usually counts leap seconds):
UTC + ``tod_utc_offset`` + ``tod_leap_seconds``, by default UTC+01:00 with 27 leap seconds,
and from the job's conf when the simulator is derived from it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devtools.sim import Delivery, Replicator, SimConfig, default_config
from devtools.sim.__main__ import _config, build_parser
from devtools.sim.clock import WallClock, micros_of
from devtools.sim.config import from_settings, load_settings_config
from pipeline.config import load_settings
from pipeline.urb import decode_message, requests
from pipeline.urb.layouts import ALL_TABLES

TEST_CONF = Path(__file__).resolve().parents[4] / "conf" / "test.yaml"
UTC_CLOCK = {"tod_utc_offset": "+00:00", "tod_leap_seconds": 0}


def _session(config: SimConfig) -> list[Delivery]:
    """Everything that writes a time: lifecycle, GFFTs, transactions, C5 and utility statuses,
    a resend, STAT and an initial state."""
    rep = Replicator(config, seed=11)
    out = rep.start() + rep.transactions(40) + rep.restart() + rep.transactions(10)
    tsnr = rep.states["COLOR"].tsnr
    out += rep.answer(requests.tran("COLOR", "OUT1", tsnr, rnam="REPLY", rtok="T"))
    out += rep.answer(requests.stat("EMPLOYEE", rnam="REPLY", rtok="T"))
    out += rep.answer(requests.inst_file("ICOLOR", 10006, 4, rnam="REPLY", rtok="T"))
    return out + rep.terminate()


def _stamps(out: list[Delivery]) -> list[tuple[str, int]]:
    """(field, value) of every STCK field of every element, in order."""
    stamps = []
    for d in out:
        message = decode_message(d.value)
        for e in (message.header, *message.elements):
            for _, name, kind, _ in ALL_TABLES[e.eye]:
                if kind == "T" and name in e.fields:
                    stamps.append((name, e.fields[name]))
    return stamps


def test_every_stck_runs_offset_and_leap_seconds_ahead_of_utc() -> None:
    base = default_config().model_copy(update={
        "gfft_files": (4,), "c5_rate": 0.2,
        "utility_events": Replicator(default_config()).config.utility_events})
    machine = _stamps(_session(base))
    utc = _stamps(_session(base.model_copy(update=UTC_CLOCK)))
    ahead = base.tod_offset_us << 12
    assert ahead == (3600 + 27) * 1_000_000 << 12
    names = {name for name, value in machine if value}
    assert {"urbhtime", "urbtttim", "urbtptim", "urbrtime", "urbstime", "urbsttim",
            "urbsptim", "urbftim1"} <= names
    assert [n for n, _ in machine] == [n for n, _ in utc]
    for (name, mine), (_, theirs) in zip(machine, utc, strict=True):
        assert mine - theirs == (ahead if theirs else 0), name


def test_the_utc_clock_starts_at_start_time() -> None:
    config = default_config().model_copy(update=UTC_CLOCK)
    first = Replicator(config).start()[0]
    stamp = decode_message(first.value).header.urbhtime >> 12
    assert stamp - micros_of(datetime.fromisoformat(config.start_time)) < 10


def test_a_wall_clock_tells_machine_time() -> None:
    offset = default_config().tod_offset_us
    now = micros_of(datetime.now(UTC))
    told = WallClock(offset).now()
    assert abs(told - now - offset) < 2_000_000
    assert abs(WallClock().now() - micros_of(datetime.fromtimestamp(time.time(), UTC))) \
        < 2_000_000


@pytest.mark.parametrize(("offset", "leap", "seconds"),
                         [("+01:00", 27, 3627), ("-05:30", 0, -19800), ("+00:00", 37, 37)])
def test_a_simulator_from_the_job_conf_has_the_jobs_clock(offset: str, leap: int,
                                                          seconds: int) -> None:
    env = {"URBPIPE__REPLICATOR__TOD_UTC_OFFSET": offset,
           "URBPIPE__REPLICATOR__TOD_LEAP_SECONDS": str(leap)}
    settings = load_settings(TEST_CONF, env=env)
    config = from_settings(settings)
    assert (config.tod_utc_offset, config.tod_leap_seconds) == (offset, leap)
    assert config.tod_offset_us == settings.replicator.tod_offset_us == seconds * 1_000_000


def test_load_settings_config_reads_the_conf_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("URBPIPE__REPLICATOR__TOD_UTC_OFFSET", "+02:00")
    config = load_settings_config(TEST_CONF)
    assert (config.tod_utc_offset, config.tod_leap_seconds) == ("+02:00", 27)


def test_cli_flags_set_the_clock_and_reject_a_bad_offset() -> None:
    args = build_parser().parse_args(["--out", "x", "--tod-utc-offset=-05:00",
                                      "--tod-leap-seconds", "0"])
    assert _config(args).tod_offset_us == -5 * 3600 * 1_000_000
    assert _config(build_parser().parse_args(["--out", "x"])).tod_offset_us == 3627 * 10**6
    with pytest.raises(ValueError, match="tod_utc_offset"):
        _config(build_parser().parse_args(["--out", "x", "--tod-utc-offset", "1:00"]))
