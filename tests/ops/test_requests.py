"""``urbpipe request`` without a broker: building requests, matching the simulator's replies."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from pipeline.config import Settings
from pipeline.ops import requests_cmd as rc
from pipeline.ops.cli import main
from pipeline.ops.errors import UsageError
from pipeline.sim import Replicator
from pipeline.sim.config import from_settings
from pipeline.urb import decode_message


def args(**values: Any) -> argparse.Namespace:
    base = {"subscription": None, "destination": None, "tsnr": None, "name": None,
            "dbid": None, "fnr": None, "isns": None, "selection": None}
    return argparse.Namespace(**{**base, **values})


def replies_from_sim(settings: Settings, request: rc.Request) -> list[rc.Reply]:
    rep = Replicator(from_settings(settings), seed=3)
    rep.start()
    rep.transactions(5)
    out = []
    for delivery in rep.answer(request.value):
        if delivery.topic == settings.topics.replies:
            out += rc.matching_replies(delivery.value, request)
    return out


def test_each_kind_builds_the_codec_request(ops_settings: Settings) -> None:
    cases = {"tran": args(subscription="COLOR", tsnr=7),
             "stat": args(destination="OUT1"),
             "inst": args(name="ICOLOR", dbid=10006, fnr=4, isns="1,5-9"),
             "open": args(destination="OUT1"), "close": args(destination="OUT1")}
    for kind, ns in cases.items():
        req = rc.build_request(kind, ns, ops_settings, "TOK1", "REPLY")
        (urbi,) = decode_message(req.value).elements
        assert (urbi.urbirt, urbi.urbirtok.strip(), urbi.urbirnam.strip()) == (
            rc.KINDS[kind], "TOK1", "REPLY")
    tran = rc.build_request("tran", cases["tran"], ops_settings, "TOK1", "REPLY")
    assert decode_message(tran.value).elements[0].urbidnam.strip() == "OUT1"  # from conf


def test_invalid_request_is_a_usage_error(ops_settings: Settings) -> None:
    with pytest.raises(UsageError, match="request tran"):
        rc.build_request("tran", args(subscription="COLOR", tsnr=0), ops_settings, "T", "REPLY")
    with pytest.raises(UsageError, match="--isns"):
        rc.parse_isns("1,x")


def test_tran_error_reply_is_matched_and_complete(ops_settings: Settings) -> None:
    req = rc.build_request("tran", args(subscription="COLOR", tsnr=999), ops_settings,
                           "TOK2", "REPLY")
    replies = replies_from_sim(ops_settings, req)
    assert [(r.rt, r.st, r.rsp, r.subc) for r in replies] == [("TRAN", "TRSP", 131, 35)]
    assert replies[0].is_error and rc.reply_complete(req, replies)
    assert "not found in the resend buffer" in replies[0].describe()


def test_tran_ok_and_other_tokens_ignored(ops_settings: Settings) -> None:
    req = rc.build_request("tran", args(subscription="COLOR", tsnr=1), ops_settings,
                           "TOK3", "REPLY")
    (reply,) = replies_from_sim(ops_settings, req)
    assert (reply.st, reply.is_error) == ("TRSP", False)
    other = rc.Request("TRAN", "COLOR", req.value, "OTHER", "COLOR", 1)
    assert replies_from_sim(ops_settings, other) == []
    other_tsnr = rc.Request("TRAN", "COLOR", req.value, "TOK3", "COLOR", 2)
    assert replies_from_sim(ops_settings, other_tsnr) == []


def test_stat_waits_for_more_subs_after_the_last(ops_settings: Settings) -> None:
    req = rc.build_request("stat", args(destination="OUT1"), ops_settings, "TOK4", "REPLY")
    rep = Replicator(from_settings(ops_settings), seed=3)
    values = [d.value for d in rep.answer(req.value) if d.topic == ops_settings.topics.replies]
    assert len(values) == 2  # one SUBS per subscription on OUT1
    assert not rc.reply_complete(req, rc.matching_replies(values[0], req))

    class Msg:
        def __init__(self, value: bytes) -> None:
            self._value = value

        def error(self) -> None:
            return None

        def value(self) -> bytes:
            return self._value

    class FakeConsumer:
        """Delivers one SUBS per poll, then nothing; each poll advances a fake clock."""

        def __init__(self) -> None:
            self.now = 0.0
            self.queue = [[Msg(v)] for v in values]

        def consume(self, _n: int, timeout: float) -> list[Msg]:
            self.now += timeout
            return self.queue.pop(0) if self.queue else []

    consumer = FakeConsumer()
    got = rc._collect(consumer, req, timeout=30, settle=2.0, clock=lambda: consumer.now)
    assert [r.st for r in got] == ["SUBS", "SUBS"]
    assert 2.0 <= consumer.now < 5.0  # settled 2 s after the last, not the full 30 s


def test_reply_topic_from_conf(ops_settings: Settings) -> None:
    assert rc.reply_topic(ops_settings, "REPLY", None) == "urb.replies"
    assert rc.reply_topic(ops_settings, "OUT1", None) == "urb.out1"
    assert rc.reply_topic(ops_settings, "X", "my.topic") == "my.topic"
    with pytest.raises(UsageError):
        rc.reply_topic(ops_settings, "NOWHERE", None)


def test_unreachable_broker_exits_3(conf_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["request", "stat", "--subscription", "COLOR", "--conf-file", str(conf_file),
                 "--no-reply", "--timeout", "1"])
    assert code == 3
    assert capsys.readouterr().err.startswith("error: request not delivered")
