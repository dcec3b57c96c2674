"""Requests are answered the way seed 000 describes, in both forms."""

from __future__ import annotations

import pytest

from devtools.sim import Replicator, default_config
from devtools.sim.model import SimConfig
from pipeline.urb import requests
from tests.support.streams import Received, decode_all, rebuild

FORMS = ["ebcdic", "ascii"]


@pytest.fixture(params=FORMS)
def encoding(request: pytest.FixtureRequest) -> str:
    return request.param


def config(encoding: str, **update: object) -> SimConfig:
    base = default_config().with_encoding(encoding)  # type: ignore[arg-type]
    return base.model_copy(update={"max_message_size": 900, **update})


def form(encoding: str) -> dict[str, bool]:
    ebcdic = encoding == "ebcdic"
    return {"ebcdic": ebcdic, "big_endian": ebcdic}


def started(encoding: str, n: int = 60, **update: object) -> Replicator:
    rep = Replicator(config(encoding, **update), seed=3)
    rep.run(n)
    return rep


def on(received: list[Received], topic: str) -> list[Received]:
    return [r for r in received if r.topic == topic]


def statuses(received: list[Received]) -> list[Received]:
    return [r for r in received if r.first.eye == "URBS"]


# -- TRAN ------------------------------------------------------------------------------------


def test_tran_resends_before_images_only_with_flags(encoding: str) -> None:
    rep = started(encoding)
    tsnr = rep.states["EMPLOYEE"].tsnr - 1
    req = requests.tran("EMPLOYEE", "OUT2", tsnr, rnam="REPLY", rtok="TOK1", **form(encoding))
    out = decode_all(rep.answer(req))
    data = on(out, "urb.out2")
    assert data and not on(out, "urb.out1")
    (tx,) = rebuild(data)["EMPLOYEE"]
    assert tx.tsnr == tsnr
    assert (tx.urbt.urbtrsnd, tx.urbt.urbtptrn) == ("Y", "Y")
    for urbr, urbds in tx.records:
        assert urbr.urbrrsnd == "Y"
        assert all(d.urbdtyp == "B" for d in urbds)
    (reply,) = on(out, "urb.replies")
    s = reply.first
    assert (s.urbsrt, s.urbsst, s.urbsrsp, s.urbssubc) == ("TRAN", "TRSP", 0, 0)
    assert (s.urbssnam, s.urbsdnam, s.urbstsnr, s.urbsrtok) == ("EMPLOYEE", "OUT2", tsnr, "TOK1")


def test_tran_resent_records_match_the_original(encoding: str) -> None:
    rep = Replicator(config(encoding), seed=3)
    original = rebuild(on(decode_all(rep.run(40)), "urb.out1"))["COLOR"]
    target = original[len(original) // 2]
    out = decode_all(rep.answer(requests.tran("COLOR", "OUT1", target.tsnr, **form(encoding))))
    (again,) = rebuild(on(out, "urb.out1"))["COLOR"]
    assert again.urbt.urbtttim == target.urbt.urbtttim
    assert [(r.urbrisn, r.urbrtyp) for r, _ in again.records] == [
        (r.urbrisn, r.urbrtyp) for r, _ in target.records
    ]
    for (_, before_only), (_, full) in zip(again.records, target.records, strict=True):
        assert [d.payload for d in before_only] == [d.payload for d in full if d.urbdtyp == "B"]


def test_tran_without_destination_goes_to_all_of_the_subscription(encoding: str) -> None:
    rep = started(encoding)
    tsnr = rep.states["EMPLOYEE"].tsnr
    out = decode_all(rep.answer(requests.tran("EMPLOYEE", "", tsnr, **form(encoding))))
    assert {r.topic for r in out} == {"urb.out1", "urb.out2"}
    assert all(r.key is None for r in out), "a real connector writes no key"


def test_tran_35_when_the_transaction_left_the_buffer(encoding: str) -> None:
    cfg = config(encoding)
    small = cfg.resend_buffers[0].model_copy(update={"size": 8000})
    rep = Replicator(cfg.model_copy(update={"resend_buffers": (small,)}), seed=3)
    rep.run(200)
    buffer = rep.buffers["RESEND1"]
    assert 0 < buffer.used <= 8000
    kept = buffer.tsnrs("EMPLOYEE")
    assert kept and kept[0] > 1 and kept == list(range(kept[0], kept[-1] + 1))
    req = requests.tran("EMPLOYEE", "OUT2", 1, rnam="REPLY", rtok="T", **form(encoding))
    out = decode_all(rep.answer(req))
    assert {r.topic for r in out} == {"urb.replies", "urb.out2"}  # reply and named destination
    for r in out:
        s = r.first
        assert (s.urbsst, s.urbsrsp, s.urbssubc, s.urbstsnr) == ("TRSP", 131, 35, 1)
    req = requests.tran("EMPLOYEE", "OUT2", kept[0], **form(encoding))
    ok = decode_all(rep.answer(req))
    assert ok and ok[0].first.eye == "URBT" and ok[0].first.urbttsnr == kept[0]


def test_tran_34_when_the_subscription_has_no_resend_buffer(encoding: str) -> None:
    rep = started(encoding)
    req = requests.tran("ORDERS", "OUT2", 1, rnam="REPLY", **form(encoding))
    out = decode_all(rep.answer(req))
    assert {r.topic for r in out} == {"urb.replies", "urb.out2"}
    assert all((r.first.urbsrsp, r.first.urbssubc) == (131, 34) for r in out)


@pytest.mark.parametrize(
    ("snam", "dnam", "subc"), [("NOSUCH", "OUT1", 32), ("COLOR", "OUT2", 33), ("COLOR", "XX", 31)]
)
def test_tran_other_errors_go_to_the_reply_destination(snam: str, dnam: str, subc: int) -> None:
    rep = started("ebcdic")
    out = decode_all(rep.answer(requests.tran(snam, dnam, 1, rnam="REPLY")))
    assert [(r.topic, r.first.urbsrsp, r.first.urbssubc) for r in out] == [
        ("urb.replies", 131, subc)
    ]


def test_tran_answer_never_includes_after_images_even_for_after_only_subscription() -> None:
    cfg = config("ebcdic")
    subs = tuple(
        s.model_copy(update={"images": "after", "resend_buffer": "RESEND1"})
        for s in cfg.subscriptions
    )
    rep = Replicator(cfg.model_copy(update={"subscriptions": subs}), seed=1)
    rep.run(30)
    out = decode_all(rep.answer(requests.tran("ORDERS", "OUT2", rep.states["ORDERS"].tsnr)))
    (tx,) = rebuild(out)["ORDERS"]
    assert all(not urbds for _, urbds in tx.records)
    assert all(urbr.urbrdcnt == 0 for urbr, _ in tx.records)


# -- STAT ------------------------------------------------------------------------------------


def test_stat_subscription_reports_each_destination_pair(encoding: str) -> None:
    rep = started(encoding)
    out = decode_all(
        rep.answer(requests.stat("EMPLOYEE", rnam="REPLY", rtok="S1", **form(encoding)))
    )
    pairs = {(r.topic, r.first.urbsdnam) for r in out}
    assert pairs == {
        ("urb.out1", "OUT1"),
        ("urb.out2", "OUT2"),
        ("urb.replies", "OUT1"),
        ("urb.replies", "OUT2"),
    }
    state = rep.states["EMPLOYEE"]
    for r in out:
        s = r.first
        assert (s.urbsrt, s.urbsst, s.urbsrsp, s.urbssnam, s.urbsrtok) == (
            "STAT",
            "SUBS",
            0,
            "EMPLOYEE",
            "S1",
        )
        assert s.urbstsnr == state.tsnr and s.urbstsnr > 0
        assert s.urbsttim >> 12 == state.commit and s.urbsptim >> 12 == state.processed


def test_stat_destination_reports_each_subscription(encoding: str) -> None:
    rep = started(encoding)
    out = decode_all(rep.answer(requests.stat(dnam="OUT2", **form(encoding))))
    assert sorted(r.first.urbssnam for r in out) == ["EMPLOYEE", "ORDERS"]
    assert {r.topic for r in out} == {"urb.out2"}


def test_stat_unknown_subscription_is_131_8() -> None:
    out = decode_all(started("ebcdic").answer(requests.stat("NOSUCH", rnam="REPLY")))
    assert [(r.topic, r.first.urbsrsp, r.first.urbssubc) for r in out] == [("urb.replies", 131, 8)]


# -- INST ------------------------------------------------------------------------------------


def _inst_run(encoding: str, request: bytes) -> tuple[Replicator, list[Received]]:
    rep = started(encoding, 30)
    return rep, decode_all(rep.answer(request))


def test_inst_all_records_init_pseudo_transactions_cmpl(encoding: str) -> None:
    rep, out = _inst_run(
        encoding, requests.inst_file("ICOLOR", 10006, 4, rnam="REPLY", rtok="IT", **form(encoding))
    )
    reply = on(out, "urb.replies")
    assert [r.status for r in reply] == ["INIT", "CMPL"]
    data = on(out, "urb.out1")
    assert data[0].status == "INIT" and data[-1].status == "CMPL"
    for r in [*reply, data[0], data[-1]]:
        s = r.first
        assert (s.urbsrt, s.urbsinam, s.urbsdbid, s.urbsfnr, s.urbsrtok) == (
            "INST",
            "ICOLOR",
            10006,
            4,
            "IT",
        )
    txs = rebuild(data)["COLOR"]
    isns = []
    for tx in txs:
        assert (tx.tsnr, tx.urbt.urbtinst, tx.urbt.urbtrtok) == (0, "Y", "IT")
        for urbr, urbds in tx.records:
            assert urbr.urbrtyp == "R"
            assert [d.urbdtyp for d in urbds] == ["A"]
            isns.append(urbr.urbrisn)
    assert isns == rep.generator.file("COLOR", 4).sorted_isns()
    assert max(len(tx.records) for tx in txs) == rep.config.initial_state_chunk


def test_inst_isn_list_honoured_missing_isn_is_113(encoding: str) -> None:
    rep, out = _inst_run(
        encoding,
        requests.inst_file(
            "IEMPL", 10006, 9, rnam="REPLY", isns=[3, (10, 14), 999_999], **form(encoding)
        ),
    )
    data = on(out, "urb.out1")
    records = [r for tx in rebuild(data)["EMPLOYEE"] for r in tx.records]
    existing = set(rep.generator.file("EMPLOYEE", 9).sorted_isns())
    expected = [3, *[i for i in range(10, 15) if i in existing], 999_999]
    assert [urbr.urbrisn for urbr, _ in records] == expected
    missing = records[-1]
    assert (missing[0].urbrrsp, missing[0].urbrdcnt, missing[1]) == (113, 0, [])
    assert on(out, "urb.out2")  # EMPLOYEE's second destination gets the data too


def test_inst_unknown_dbid_fnr_is_erro_131_12(encoding: str) -> None:
    _, out = _inst_run(
        encoding, requests.inst_file("ICOLOR", 10006, 2, rnam="REPLY", rtok="E", **form(encoding))
    )
    (r,) = out
    s = r.first
    assert (r.topic, s.urbsrt, s.urbsst, s.urbsrsp, s.urbssubc) == (
        "urb.replies",
        "INST",
        "ERRO",
        131,
        12,
    )
    assert (s.urbsinam, s.urbsdbid, s.urbsfnr) == ("ICOLOR", 10006, 2)


@pytest.mark.parametrize(
    ("request_bytes", "subc"),
    [
        (requests.inst_file("NOSUCH", 1, 1, rnam="REPLY"), 9),
        (requests.inst_file("IEMPL", 10006, 9, rnam="REPLY"), 19),
        (requests.inst_file("ICOLOR", 10006, 4, rnam="REPLY", isns=[1, 2]), 15),
    ],
)
def test_inst_other_errors(request_bytes: bytes, subc: int) -> None:
    out = decode_all(started("ebcdic", 10).answer(request_bytes))
    assert [(r.first.urbsst, r.first.urbsrsp, r.first.urbssubc) for r in out] == [
        ("ERRO", 131, subc)
    ]


def test_inst_does_not_disturb_tsnr_sequence(encoding: str) -> None:
    rep = Replicator(config(encoding), seed=2)
    out = rep.start() + rep.transactions(20)
    out += rep.answer(requests.inst_file("ICOLOR", 10006, 4, rnam="REPLY", **form(encoding)))
    out += rep.transactions(20) + rep.terminate()
    txs = rebuild(on(decode_all(out), "urb.out1"))["COLOR"]
    real = [t.tsnr for t in txs if t.tsnr]
    assert real == list(range(1, len(real) + 1))


# -- OPND / CLSD -----------------------------------------------------------------------------


def test_close_holds_messages_and_open_releases_them(encoding: str) -> None:
    rep = Replicator(config(encoding), seed=4)
    out = rep.start() + rep.transactions(10)
    closed = decode_all(
        rep.answer(requests.close_destination("OUT1", rnam="REPLY", rtok="C", **form(encoding)))
    )
    s = closed[0].first
    assert (closed[0].topic, s.urbsrt, s.urbsst, s.urbsdnam, s.urbsrsp) == (
        "urb.replies",
        "CLSD",
        "CLOS",
        "OUT1",
        0,
    )
    while_closed = decode_all(rep.transactions(30))
    assert not on(while_closed, "urb.out1")
    opened = decode_all(
        rep.answer(requests.open_destination("OUT1", rnam="REPLY", **form(encoding)))
    )
    assert opened[-1].first.urbsst == "OPEN" and opened[-1].topic == "urb.replies"
    out1 = on(decode_all(out), "urb.out1") + on(opened, "urb.out1")
    assert [r.message.header.urbhmsnr for r in out1] == list(range(1, len(out1) + 1))
    rebuild(out1)  # complete, continuous transactions


def test_unknown_destination_is_131_26() -> None:
    out = decode_all(started("ebcdic", 5).answer(requests.open_destination("NOPE", rnam="REPLY")))
    assert [(r.first.urbsst, r.first.urbsrsp, r.first.urbssubc) for r in out] == [("OPEN", 131, 26)]


def test_garbage_request_is_ignored() -> None:
    assert started("ebcdic", 5).answer(b"not a request") == []
