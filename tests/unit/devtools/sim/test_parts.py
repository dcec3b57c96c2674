"""Unit tests of the simulator's pieces: payloads, packer, resend buffer, config."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from devtools.sim.config import build_config, default_config, load_config, parse_size
from devtools.sim.elements import element_size, transaction_parts
from devtools.sim.model import LayoutField
from devtools.sim.packer import MessageTooSmall, Packer
from devtools.sim.payloads import decode_record, encode_record, random_record
from devtools.sim.resend import ResendBuffer, stored_size
from devtools.sim.transactions import RecordChange, Transaction

LAYOUT = (
    LayoutField(name="AA", format="A", length=6),
    LayoutField(name="PK", format="P", length=3),
    LayoutField(name="BI", format="B", length=2),
    LayoutField(name="UN", format="U", length=4),
)


@pytest.mark.parametrize("encoding", ["ebcdic", "ascii"])
def test_payload_round_trip(encoding: str) -> None:
    rng = random.Random(1)
    for _ in range(200):
        values = random_record(LAYOUT, rng)
        data = encode_record(LAYOUT, values, encoding)  # type: ignore[arg-type]
        assert len(data) == 15
        assert decode_record(LAYOUT, data, encoding) == values  # type: ignore[arg-type]


def test_payload_bytes_are_mainframe_formats() -> None:
    values = {"AA": "RED", "PK": -123, "BI": 258, "UN": 42}
    assert encode_record(LAYOUT, values, "ebcdic") == (
        "RED   ".encode("cp037") + b"\x00\x12\x3d" + b"\x01\x02" + b"\xf0\xf0\xf4\xf2"
    )
    assert encode_record(LAYOUT, {**values, "UN": -42}, "ascii") == (
        b"RED   " + b"\x00\x12\x3d" + b"\x02\x01" + b"\x30\x30\x34\x72"
    )


def _tx(records: int, before: int = 20, after: int = 20) -> Transaction:
    changes = tuple(
        RecordChange(1, i, "U", 10, before=bytes(before), after=bytes(after))
        for i in range(1, records + 1)
    )
    return Transaction("SUB", 1, 100, 200, bytes(28), changes)


def _parts(records: int, tsnr: int = 1, **kw: int):
    sub = default_config().subscriptions[0].model_copy(update={"name": "SUB"})
    return transaction_parts(_tx(records, **kw), tsnr, sub, 1)


def test_packer_keeps_whole_transactions_together() -> None:
    packer = Packer("SUB", 10_000)
    assert packer.add(_parts(2, 1)) == []
    assert packer.add(_parts(2, 2)) == []
    (body,) = packer.flush()
    assert [p.eye for p in body].count("URBT") == 2


def test_packer_splits_and_numbers_continuations() -> None:
    whole = sum(p.size for p in _parts(6))
    packer = Packer("SUB", 64 + whole // 2)
    bodies = packer.add(_parts(6, 7)) + packer.flush()
    assert len(bodies) >= 2
    assert bodies[0][0].fields["urbtcont"] == "Y"
    for body in bodies[1:]:
        urbc = body[0]
        assert urbc.eye == "URBC" and urbc.fields["urbctsnr"] == 7
    assert bodies[-1][0].fields["urbccont"] == " "
    assert all(body[0].fields.get("urbccont", "Y") == "Y" for body in bodies[1:-1])


def test_packer_starts_a_new_message_when_next_does_not_fit_whole() -> None:
    size = sum(p.size for p in _parts(2))
    packer = Packer("SUB", 64 + size + 10)
    assert packer.add(_parts(2, 1)) == []
    done = packer.add(_parts(2, 2))
    assert len(done) == 1 and done[0][0].fields["urbttsnr"] == 1


def test_packer_rejects_an_element_larger_than_a_message() -> None:
    with pytest.raises(MessageTooSmall):
        Packer("SUB", 300).add(_parts(1, before=400))


def test_resend_buffer_is_circular_and_drops_after_images() -> None:
    tx = _tx(3)
    size = stored_size(tx.for_resend())
    assert size == element_size("URBT") + element_size("URBE") + 3 * (
        element_size("URBR") + element_size("URBD", 20)
    )
    buffer = ResendBuffer(size * 2 + 1)
    for tsnr in range(1, 6):
        buffer.keep(tsnr, tx)
    assert buffer.tsnrs("SUB") == [4, 5]
    kept = buffer.find("SUB", 5)
    assert kept is not None and all(r.after is None and r.before for r in kept.records)
    assert buffer.find("SUB", 1) is None


def test_config_sizes_and_yaml(tmp_path: Path) -> None:
    assert parse_size("2048K") == 2048 * 1024 and parse_size("1M") == 1 << 20
    assert parse_size(77) == 77
    path = tmp_path / "c.yaml"
    path.write_text(
        "max_message_size: 5000\nresend_buffers: [{name: R, size: 1M}]\n"
        "destinations: [{name: D, topic: t}]\n"
        "subscriptions:\n  - {name: S, destinations: [D], dbid: 1, files: [2],"
        " resend_buffer: R, layout: [{name: AA, format: A, length: 4}]}\n",
        encoding="utf-8",
    )
    cfg = load_config(path)
    assert cfg.max_message_size == 5000 and cfg.resend_buffers[0].size == 1 << 20


def test_config_validation_names_the_problem() -> None:
    raw = {
        "destinations": [{"name": "D", "topic": "t"}],
        "subscriptions": [
            {
                "name": "S",
                "destinations": ["NOPE"],
                "dbid": 1,
                "files": [1],
                "layout": [{"name": "AA", "format": "A", "length": 4}],
            }
        ],
    }
    with pytest.raises(ValidationError, match="unknown destinations"):
        build_config(raw)
    raw["subscriptions"][0]["destinations"] = ["D"]
    raw["subscriptions"][0]["name"] = "TOOLONGNAME"
    with pytest.raises(ValidationError, match=r"1\.\.8 characters"):
        build_config(raw)


def test_default_config_has_what_the_tests_rely_on() -> None:
    cfg = default_config()
    assert {s.name for s in cfg.subscriptions} == {"COLOR", "EMPLOYEE", "ORDERS"}
    assert cfg.destination("OUT1").topic == "urb.out1"
    assert cfg.destination("REPLY").topic == "urb.replies"
    assert cfg.request_topic == "urb.requests"
    assert cfg.subscription("ORDERS").resend_buffer is None


def test_config_from_the_jobs_settings() -> None:
    from devtools.config import rig
    from devtools.sim.config import from_settings
    from pipeline.config import load_settings

    settings = load_settings(Path(__file__).resolve().parents[4] / "conf" / "test.yaml", env={})
    cfg = from_settings(settings)
    topics = {d.name: d.topic for d in cfg.destinations}
    for topic, dest in settings.topics.outputs.items():
        assert topics[dest] == topic
    assert topics[settings.replicator.reply_destination] == settings.topics.replies
    assert cfg.request_topic == settings.topics.requests
    generate = rig(settings)
    for sub in settings.subscriptions:
        ours, how = cfg.subscription(sub.name), generate.subscription(sub.name)
        assert ours.encoding == ("ebcdic" if sub.ebcdic else "ascii")
        assert list(ours.files) == sub.files and list(ours.destinations) == sub.destinations
        assert (ours.resend_buffer is not None) == how.resend_buffer
        if sub.initial_state:
            assert cfg.initial_state(sub.initial_state) is not None
