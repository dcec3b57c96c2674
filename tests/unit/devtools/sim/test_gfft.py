"""The simulator's GFFT (``--gfft FNR``): sent after STRT and REST, built from the layout its
payloads follow, so the stream's own layout decodes the simulator's images."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from devtools.sim import Replicator, SimConfig, default_config, read_messages
from devtools.sim.__main__ import main
from devtools.sim.payloads import decode_record
from pipeline.payload import decode_payload, layout_from_gfft
from pipeline.urb import decode_message


def _config(encoding: str) -> SimConfig:
    base = default_config().with_encoding(encoding).model_dump()
    return SimConfig.model_validate({**base, "gfft_files": (4,), "c5_rate": 0.0,
                                     "utility_events": ()})


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_gfft_after_start_and_restart_decodes_the_images(encoding: str) -> None:
    config = _config(encoding)
    sim = Replicator(config, seed=3)
    messages = [decode_message(d.value) for d in
                sim.start() + sim.transactions(6) + sim.restart() + sim.transactions(2)]
    eyes = [[e.eye for e in m.elements] for m in messages]
    gffts = [i for i, e in enumerate(eyes) if e == ["URBF"]]
    first_data = next(i for i, e in enumerate(eyes) if "URBT" in e)
    rest = [i for i, m in enumerate(messages) if any(
        e.eye == "URBS" and e.urbsst == "REST" for e in m.elements)]
    assert len(gffts) == 2 and gffts[0] < first_data
    assert gffts[1] > rest[-1] and not any("URBT" in e for e in eyes[rest[0]:gffts[1]])
    urbf = messages[gffts[0]].elements[0]
    layout = layout_from_gfft(urbf, {"AA": "color"})
    color = config.subscription("COLOR")
    assert (layout.key.dbid, layout.key.fnr, layout.key.gfid) == (color.dbid, 4, "SIMGFB")
    assert [(i.name, i.column, i.format, i.length) for i in layout.items] == [
        (f.name, "color" if f.name == "AA" else f.name.lower(), f.format, f.length)
        for f in color.layout]
    images, fnr = [], 0
    for e in (e for m in messages for e in m.elements):
        fnr = e.urbrfnr if e.eye == "URBR" else fnr
        if e.eye == "URBD" and fnr == 4:
            images.append(e.payload)
    assert images
    for image in images[:20]:
        want = decode_record(color.layout, image, encoding)  # the simulator's own reading
        got = decode_payload(image, layout, ebcdic=encoding == "ebcdic",
                             big_endian=encoding == "ebcdic")
        assert got == {("color" if k == "AA" else k.lower()): Decimal(v)
                       if isinstance(v, int) and not isinstance(v, bool) else v
                       for k, v in want.items()}


def test_cli_flag(tmp_path: Path) -> None:
    out = tmp_path / "sim.bin"
    assert main(["--out", str(out), "--transactions", "3", "--gfft", "4"]) == 0
    eyes = [e.eye for m in read_messages(out) for e in decode_message(m).elements]
    assert eyes.count("URBF") == 1
