"""The codec benchmark's corpus: the seed fixtures it reads are where the test tree keeps them
(a moved fixture folder once broke ``make bench`` at its first step)."""

from __future__ import annotations

from benchmarks.bench_codec import corpus
from pipeline.urb import decode_message


def test_every_corpus_message_is_read_and_decodes() -> None:
    messages = corpus()
    assert len(messages) == 5
    for name, raw in messages:
        assert raw, name
        decode_message(raw)  # raises on a file that is not a URB message
