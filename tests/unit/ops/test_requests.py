"""``urbpipe request`` without a broker: building requests, matching the simulator's replies."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from devtools.sim import Replicator
from devtools.sim.config import from_settings
from pipeline.config import Settings, Subscription
from pipeline.errors import UsageError
from pipeline.ops import requests_cmd as rc
from pipeline.ops.cli import main
from pipeline.urb import decode_message
from pipeline.urb.requests import MAX_ISN


def args(**values: Any) -> argparse.Namespace:
    base = {"subscription": None, "destination": None, "tsnr": None, "name": None,
            "dbid": None, "fnr": None, "isns": None, "selection": None, "files": None}
    return argparse.Namespace(**{**base, **values})


def sim_reply_values(settings: Settings, request: rc.Request) -> list[bytes]:
    """The messages the simulator writes to the reply topic for ``request``."""
    rep = Replicator(from_settings(settings), seed=3)
    rep.start()
    rep.transactions(5)
    return [d.value for d in rep.answer(request.value) if d.topic == settings.topics.replies]


def replies_from_sim(settings: Settings, request: rc.Request) -> list[rc.Reply]:
    return [r for v in sim_reply_values(settings, request)
            for r in rc.matching_replies(v, request)]


class Msg:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value


class FakeConsumer:
    """Delivers one message per poll, then nothing; each poll advances a fake clock."""

    def __init__(self, values: list[bytes]) -> None:
        self.now = 0.0
        self.queue = [[Msg(v)] for v in values]

    def consume(self, _n: int, timeout: float) -> list[Msg]:
        self.now += timeout
        return self.queue.pop(0) if self.queue else []


def collect(request: rc.Request, values: list[bytes]) -> tuple[list[rc.Reply], float]:
    """The replies the command collects from ``values`` (timeout 30, settle 2), and when
    it stopped waiting."""
    consumer = FakeConsumer(values)
    got = rc._collect(consumer, request, timeout=30, settle=2.0, clock=lambda: consumer.now)
    return got, consumer.now


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
    values = sim_reply_values(ops_settings, req)
    assert len(values) == 2  # one SUBS per subscription on OUT1
    assert not rc.reply_complete(req, rc.matching_replies(values[0], req))
    got, stopped = collect(req, values)
    assert [r.st for r in got] == ["SUBS", "SUBS"]
    assert 2.0 <= stopped < 5.0  # settled 2 s after the last, not the full 30 s


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


# --- request inst: one message for the whole initial-state definition -------------------------

EMPTY = [(MAX_ISN, MAX_ISN)]


@pytest.fixture
def inst_settings(ops_settings: Settings) -> Settings:
    """The ops conf whose EMPLOYEE subscription names the three-file definition IEMPL."""
    employee = Subscription(name="EMPLOYEE", destinations=["OUT1"], dbid=10006,
                            files=[9, 10, 11], initial_state="IEMPL")
    return ops_settings.model_copy(update={"subscriptions": [ops_settings.subscriptions[0],
                                                             employee]})


def inst_urbis(settings: Settings, **values: Any) -> tuple[rc.Request, list[Any]]:
    """The INST request for these command-line values, and its URBIs as decoded."""
    req = rc.build_request("inst", args(**values), settings, "TOKI", "REPLY")
    msg = decode_message(req.value)
    assert msg.header.urbhlent == len(req.value)
    assert {(u.urbirt, u.urbiinam, u.urbirtok, u.urbirnam) for u in msg.elements} == {
        ("INST", values["name"], "TOKI", "REPLY")}  # one definition, one token: seed 000
    assert req.files == tuple((u.urbidbid, u.urbifnr) for u in msg.elements)
    return req, msg.elements


def test_inst_asks_for_every_file_conf_gives_the_definition_whole(
        inst_settings: Settings) -> None:
    _, urbis = inst_urbis(inst_settings, name="IEMPL")
    assert [(u.urbidbid, u.urbifnr, u.urbilend) for u in urbis] == [
        (10006, 9, 0), (10006, 10, 0), (10006, 11, 0)]


def test_inst_isns_for_one_file_and_the_empty_selection_for_the_others(
        inst_settings: Settings) -> None:
    _, urbis = inst_urbis(inst_settings, name="IEMPL", dbid=10006, fnr=10, isns="1,5-9")
    assert [(u.urbifnr, u.isns) for u in urbis] == [(9, EMPTY), (10, [1, (5, 9)]),
                                                    (11, EMPTY)]


def test_inst_files_from_the_command_line(ops_settings: Settings) -> None:
    """No definition in conf: DBID FNR plus --file name the files, ISNs per file."""
    _, urbis = inst_urbis(ops_settings, name="IX", dbid=12, fnr=20, files=["21:3,5-6", "22"])
    assert [(u.urbidbid, u.urbifnr, u.isns) for u in urbis] == [
        (12, 20, EMPTY), (12, 21, [3, (5, 6)]), (12, 22, EMPTY)]
    _, whole = inst_urbis(ops_settings, name="IX", dbid=12, fnr=20, files=["21", "20"])
    assert [(u.urbifnr, u.urbilend) for u in whole] == [(20, 0), (21, 0)]


def test_inst_file_options_override_conf_and_take_its_database(
        inst_settings: Settings) -> None:
    _, urbis = inst_urbis(inst_settings, name="IEMPL", files=["9", "11:4"])
    assert [(u.urbidbid, u.urbifnr, u.isns) for u in urbis] == [
        (10006, 9, EMPTY), (10006, 11, [4])]


def test_inst_one_file_definition_as_before(ops_settings: Settings,
                                            inst_settings: Settings) -> None:
    """Not in conf: DBID FNR is the definition's only file; selection data as text."""
    _, (urbi,) = inst_urbis(ops_settings, name="IEMPLAA", dbid=10006, fnr=9,
                            selection="2001100020011100")
    assert (urbi.urbifnr, urbi.urbilend) == (9, 16)
    _, (one,) = inst_urbis(inst_settings, name="ICOLOR", dbid=10006, fnr=4, isns="7")
    assert (one.urbifnr, one.isns) == (4, [7])


@pytest.mark.parametrize(("values", "match"), [
    ({"name": "IEMPL", "dbid": 10006, "fnr": 12}, "not a file of IEMPL"),
    ({"name": "IEMPL", "isns": "1"}, "give DBID FNR of the file"),
    ({"name": "IEMPL", "dbid": 10006, "fnr": 9, "selection": "X"}, "one file"),
    ({"name": "IEMPL", "dbid": 10006}, "together"),
    ({"name": "NOSUCH"}, "no subscription in conf has initial_state NOSUCH"),
    ({"name": "NOSUCH", "files": ["3"]}, "DBID FNR"),
    ({"name": "IEMPL", "files": ["9", "9:1"]}, "given twice"),
    ({"name": "IEMPL", "dbid": 10006, "fnr": 9, "isns": "1", "files": ["9:2"]}, "both"),
    ({"name": "IEMPL", "files": ["x"]}, "FNR or FNR:ISNS"),
    ({"name": "IEMPL", "files": ["9:1,1"]}, "more than once"),
    ({"name": "IX", "dbid": 12, "fnr": 20, "files": ["20:1"], "selection": "S"}, "one manner"),
])
def test_inst_usage_errors(inst_settings: Settings, values: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        rc.build_request("inst", args(**values), inst_settings, "T", "REPLY")


def _reply(st: str, fnr: int, rsp: int = 0) -> rc.Reply:
    return rc.Reply("INST", st, rsp, 19 if rsp else 0, {"dbid": 10006 if fnr else 0,
                                                        "fnr": fnr})


def test_inst_reply_is_complete_with_a_cmpl_per_file_or_an_erro(
        inst_settings: Settings) -> None:
    req, _ = inst_urbis(inst_settings, name="IEMPL")
    assert not rc.reply_complete(req, [_reply("INIT", 9), _reply("CMPL", 9)])
    assert rc.more_may_follow(req, [_reply("INIT", 9), _reply("CMPL", 9)])
    assert not rc.more_may_follow(req, [_reply("INIT", 9)])
    assert rc.reply_complete(req, [_reply("CMPL", f) for f in (11, 9, 10)])
    assert rc.reply_complete(req, [_reply("ERRO", 9, rsp=131)])
    assert rc.reply_complete(req, [_reply("CMPL", 0)])  # a CMPL naming no file: all


def test_inst_multi_file_request_answered_by_the_simulator(inst_settings: Settings) -> None:
    """The simulator reads the definition from the same conf (ISN-list): it answers the one
    message with INIT and CMPL per file; a whole-file request is refused with 131/19."""
    req, _ = inst_urbis(inst_settings, name="IEMPL", dbid=10006, fnr=10, isns="1-3")
    replies = replies_from_sim(inst_settings, req)
    assert [(r.st, r.fields["fnr"]) for r in replies] == [
        ("INIT", 9), ("INIT", 10), ("INIT", 11), ("CMPL", 9), ("CMPL", 10), ("CMPL", 11)]
    assert rc.reply_complete(req, replies) and not any(r.is_error for r in replies)
    whole, _ = inst_urbis(inst_settings, name="IEMPL")
    (erro,) = replies_from_sim(inst_settings, whole)
    assert (erro.st, erro.rsp, erro.subc) == ("ERRO", 131, 19)
    assert "URBILEND is zero" in erro.describe()


def test_inst_help_documents_the_files_and_an_example(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["request", "inst", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--file FNR[:ISNS]" in out and "examples:" in out and "exit codes:" in out
    assert "urbpipe request inst IEMPL 10006 9 --isns 1,5-9" in out


def test_inst_usage_errors_exit_2(conf_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    conf = ["--conf-file", str(conf_file), "--no-reply"]
    assert main(["request", "inst", "NOSUCH", *conf]) == 2
    assert "initial_state NOSUCH" in capsys.readouterr().err
    assert main(["request", "inst", "IEMPL", "10006", *conf]) == 2
    assert main(["request", "inst", "IEMPL", "10006", "9", "--file", "9:x", *conf]) == 2


def _fnrs(replies: list[rc.Reply]) -> list[tuple[str, int]]:
    return [(r.st, r.fields["fnr"]) for r in replies]


def test_inst_waits_for_a_running_file_until_the_timeout(inst_settings: Settings) -> None:
    """File 10's INIT came and its CMPL did not: its processing is running, so the command
    waits the whole --timeout (not --settle) and the reply is unfinished (exit 1)."""
    req, _ = inst_urbis(inst_settings, name="IEMPL", dbid=10006, fnr=10, isns="1-3")
    values = sim_reply_values(inst_settings, req)
    cmpl_10 = [v for v in values if _fnrs(rc.matching_replies(v, req)) == [("CMPL", 10)]]
    got, stopped = collect(req, [v for v in values if v not in cmpl_10])
    assert _fnrs(got) == [("INIT", 9), ("INIT", 10), ("INIT", 11), ("CMPL", 9), ("CMPL", 11)]
    assert stopped >= 30
    assert rc.inst_pending(req, got) == [(10006, 10)]
    assert "no INST/CMPL for 10006/10" in (rc.unfinished(req, got) or "")
    done, at = collect(req, values)
    assert rc.reply_complete(req, done) and rc.unfinished(req, done) is None and at < 30


def test_inst_answered_as_a_whole_settles(inst_settings: Settings) -> None:
    """A replicator answering the request with one INIT and one CMPL (naming its first
    file): no file is known to be running, so the wait ends --settle after the CMPL."""
    req, _ = inst_urbis(inst_settings, name="IEMPL", dbid=10006, fnr=10, isns="1-3")
    values = sim_reply_values(inst_settings, req)
    first = [v for v in values if _fnrs(rc.matching_replies(v, req))[0][1] == 9]
    got, stopped = collect(req, first)
    assert _fnrs(got) == [("INIT", 9), ("CMPL", 9)]
    assert 2.0 <= stopped < 5.0
    assert not rc.reply_complete(req, got) and rc.unfinished(req, got) is None


@pytest.mark.parametrize(("states", "code"), [
    ([("INIT", 20), ("INIT", 21), ("CMPL", 20), ("CMPL", 21)], 0),
    ([("INIT", 20), ("INIT", 21), ("CMPL", 20)], 1),
    ([("INIT", 20), ("ERRO", 0)], 1),
])
def test_inst_exit_code(conf_file: Any, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str], states: list[tuple[str, int]],
                        code: int) -> None:
    """Exit 0 only with a CMPL for every file; an unfinished file or an ERRO is exit 1."""
    replies = [rc.Reply("INST", st, 131 if st == "ERRO" else 0, 14 if st == "ERRO" else 0,
                        {"dbid": 12 if fnr else 0, "fnr": fnr}) for st, fnr in states]
    sent: list[rc.Request] = []

    def fake_send_and_wait(_s: Settings, request: rc.Request, topic: str | None,
                           **_kw: Any) -> list[rc.Reply]:
        sent.append(request)
        assert topic == "urb.replies"
        return replies

    monkeypatch.setattr(rc, "send_and_wait", fake_send_and_wait)
    assert main(["request", "inst", "IX", "12", "20", "--file", "21",
                 "--conf-file", str(conf_file), "--timeout", "5"]) == code
    assert sent[0].files == ((12, 20), (12, 21))
    err = capsys.readouterr().err
    assert ("no INST/CMPL for 12/21 (INIT came" in err) == (states[-1] == ("CMPL", 20))
