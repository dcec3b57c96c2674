"""scan_message agrees with decode_message: same elements, same routing fields, same errors."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.urb import UrbFormatError, decode_message, encode_message, make_element
from pipeline.urb.scan import BINARY_ROUTING_FIELDS, ROUTING_FIELDS, scan_header, scan_message

from .conftest import SEED_FILES, load
from .test_fuzz import _extra_seeds, _mutate
from .test_properties import CODEPAGES, SETTINGS, elements, headers


def assert_agrees(raw: bytes, codepage: str = "cp037") -> None:
    """The scan of an accepted message lists the decoder's elements and their name fields."""
    msg = decode_message(raw, codepage=codepage)
    scanned = scan_message(raw, codepage=codepage)
    assert [s.eye for s in scanned] == [e.eye for e in msg.elements]
    for got, el in zip(scanned, msg.elements, strict=True):
        names = ROUTING_FIELDS.get(el.eye, frozenset()) | BINARY_ROUTING_FIELDS.get(
            el.eye, frozenset())
        assert dict(got.fields) == {k: v for k, v in el.fields.items() if k in names}
    assert scan_header(raw) == (msg.header.urbhmsnr, msg.header.urbhtime or 0)


@SETTINGS
@given(header=headers, body=elements, big=st.booleans(), ebcdic=st.booleans(),
       codepage=st.sampled_from(CODEPAGES))
def test_any_message_in_any_form(header, body, big: bool, ebcdic: bool, codepage: str) -> None:
    assert_agrees(encode_message(header, body, ebcdic=ebcdic, big_endian=big,
                                 codepage=codepage), codepage)


def test_seed_messages() -> None:
    for name in SEED_FILES:
        assert_agrees(load(name))
    for raw in _extra_seeds():
        assert_agrees(raw)


@pytest.mark.parametrize("ebcdic", [True, False])
def test_short_elements_have_only_the_fields_that_fit(ebcdic: bool) -> None:
    """An older replicator's short URBS (64 bytes) has no URBSDNAM: absent, as in the
    decoded element, while the fields before it are read."""
    urbs = make_element("URBS", urbsst="TRSP", urbsrt="TRAN", urbssnam="COLOR",
                        urbsdnam="OUT1")
    raw = bytearray(encode_message(None, [urbs], ebcdic=ebcdic, big_endian=ebcdic))
    order = "big" if ebcdic else "little"
    start = int.from_bytes(raw[4:8], order)  # URBHLEN: the first element follows the header
    del raw[start + 64:]
    raw[start + 4:start + 8] = (64).to_bytes(4, order)
    raw[12:16] = len(raw).to_bytes(4, order)
    scanned = scan_message(bytes(raw))
    assert scanned[0].fields == {"urbsrt": "TRAN", "urbsst": "TRSP", "urbsrtok": "",
                                 "urbsinam": "", "urbssnam": "COLOR"}
    assert_agrees(bytes(raw))


def test_fuzz_scan_fails_as_the_decoder_fails() -> None:
    """On 30,000 mutated messages: a scan error is the decoder's error, word for word; a
    message the decoder accepts is scanned alike. The scan may accept what only a full
    decode refuses (a bad URBD length …): the state stage quarantines those."""
    rng = random.Random(1961)
    seeds = [load(name) for name in SEED_FILES] + _extra_seeds()
    outcomes = {"both ok": 0, "both refuse": 0, "only decode refuses": 0}
    for _ in range(30_000):
        raw = _mutate(rng, rng.choice(seeds))
        try:
            decode_message(raw)
            decoded_error = None
        except UrbFormatError as exc:
            decoded_error = str(exc)
        try:
            scan_message(raw)
        except UrbFormatError as exc:
            assert str(exc) == decoded_error
            outcomes["both refuse"] += 1
            continue
        if decoded_error is None:
            assert_agrees(raw)
            outcomes["both ok"] += 1
        else:
            outcomes["only decode refuses"] += 1
    print(outcomes)
    assert all(n > 500 for n in outcomes.values()), outcomes


def test_unknown_code_page_is_refused_like_the_decoder_does() -> None:
    raw = encode_message(None, [make_element("URBT", urbtsnam="COLOR")])
    with pytest.raises(ValueError, match="unknown code page") as scanned:
        scan_message(raw, codepage="cp-nonesuch")
    with pytest.raises(ValueError) as decoded:
        decode_message(raw, codepage="cp-nonesuch")
    assert str(scanned.value) == str(decoded.value)


@SETTINGS
@given(header=headers, body=elements, big=st.booleans(), ebcdic=st.booleans(),
       junk=st.lists(st.binary(max_size=40), max_size=4), seed=st.integers(0, 2**32))
def test_headers_of_a_batch_are_each_message_s(header, body, big: bool, ebcdic: bool,
                                               junk: list[bytes], seed: int) -> None:
    """``scan_headers`` over one buffer of many messages (the decode stage's Arrow column)
    gives each message's ``scan_header``: whole messages in every form, mutated and cut ones,
    and short junk, in any order."""
    import numpy as np

    from pipeline.urb.scan import scan_headers

    raw = encode_message(header, body, ebcdic=ebcdic, big_endian=big)
    rng = random.Random(seed)
    seeds = [load(name) for name in SEED_FILES]
    messages = [raw, _mutate(rng, raw), raw[:rng.randrange(len(raw))], *junk,
                *rng.sample(seeds, 3)]
    rng.shuffle(messages)
    ends = np.cumsum([len(m) for m in messages], dtype=np.int64)
    starts = ends - [len(m) for m in messages]
    msnr, htime = scan_headers(np.frombuffer(b"".join(messages), np.uint8), starts, ends)
    assert list(zip(msnr.tolist(), htime.tolist(), strict=True)) == [
        scan_header(m) for m in messages]
