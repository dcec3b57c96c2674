"""Test-side reading of simulator output: decode, group by destination, rebuild transactions.

The rebuild here is deliberately naive and strict (it asserts the output rules as it goes), so
that tests can state the rules once and check every stream against them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from devtools.sim import Delivery, SimConfig
from pipeline.urb import Element, Message, decode_message


@dataclass
class Received:
    topic: str
    key: bytes | None  # the Kafka key the connector writes (None by default)
    size: int
    message: Message

    @property
    def first(self) -> Element:
        return self.message.elements[0]

    @property
    def status(self) -> str | None:
        return self.first.urbsst if self.first.eye == "URBS" else None


@dataclass
class Tx:
    """A transaction rebuilt from one destination's messages."""

    urbt: Element
    records: list[tuple[Element, list[Element]]] = field(default_factory=list)
    messages: int = 0
    urbcs: list[Element] = field(default_factory=list)

    @property
    def tsnr(self) -> int:
        return self.urbt.urbttsnr


def decode_all(deliveries: Iterable[Delivery]) -> list[Received]:
    return [Received(d.topic, d.key, len(d.value), decode_message(d.value)) for d in deliveries]


def by_topic(received: Iterable[Received]) -> dict[str, list[Received]]:
    groups: dict[str, list[Received]] = defaultdict(list)
    for r in received:
        groups[r.topic].append(r)
    return groups


def destination_topics(config: SimConfig) -> dict[str, str]:
    return {d.topic: d.name for d in config.destinations}


def rebuild(received: Iterable[Received]) -> dict[str, list[Tx]]:
    """Transactions per subscription from one destination's messages, checking rules 2-13."""
    done: dict[str, list[Tx]] = defaultdict(list)
    open_tx: dict[str, Tx] = {}
    for r in received:
        if r.first.eye == "URBS":
            continue
        _one_message(r, done, open_tx)
    assert not open_tx, f"transactions left open: {list(open_tx)}"
    return done


def _one_message(r: Received, done: dict[str, list[Tx]], open_tx: dict[str, Tx]) -> None:
    names = {
        getattr(e, f"{e.eye.lower()}snam")
        for e in r.message.elements
        if e.eye in ("URBT", "URBE", "URBC")
    }
    assert len(names) == 1, f"rule 13: one subscription per message, got {names}"
    (sub,) = names
    assert r.key in (None, b"", sub.encode()), "keyed by nothing, or by subscription"
    tx = open_tx.pop(sub, None)
    elements = r.message.elements
    if elements[0].eye == "URBC":
        assert tx is not None, "continuation without an open transaction"
        _check_urbc(elements[0], tx)
        tx.urbcs.append(elements[0])
        elements = elements[1:]
    else:
        assert tx is None, "new message while a transaction is open"
    tx_in_message = 0
    for el in elements:
        if el.eye == "URBT":
            assert tx is None, "rule 12: transactions never interleave"
            tx = Tx(el)
            tx_in_message += 1
        elif el.eye == "URBR":
            assert tx is not None
            tx.records.append((el, []))
        elif el.eye == "URBD":
            assert tx is not None and tx.records
            tx.records[-1][1].append(el)
        elif el.eye == "URBE":
            assert tx is not None and el.urbetsnr == tx.tsnr
            _check_counts(tx)
            tx.messages += 1
            done[sub].append(tx)
            tx = None
    if tx is not None:
        tx.messages += 1
        open_tx[sub] = tx
        cont = r.message.elements[0]
        flag = cont.urbtcont if cont.eye == "URBT" else cont.urbccont
        assert flag == "Y", "a message whose transaction goes on must say so"
    else:
        first = r.message.elements[0]
        flag = first.urbtcont if first.eye == "URBT" else first.urbccont
        assert flag in ("", " ", None), f"CONT='Y' but the transaction ended: {flag!r}"


def _check_urbc(urbc: Element, tx: Tx) -> None:
    assert urbc.urbctsnr == tx.tsnr
    rsnr = tx.records[-1][0].urbrrsnr if tx.records else 0
    dsnr = tx.records[-1][1][-1].urbddsnr if tx.records and tx.records[-1][1] else 0
    assert (urbc.urbcrsnr, urbc.urbcdsnr) == (rsnr, dsnr), "URBC must say where it stopped"


def _check_counts(tx: Tx) -> None:
    assert tx.urbt.urbtrcnt == len(tx.records)
    for rsnr, (urbr, urbds) in enumerate(tx.records, start=1):
        assert urbr.urbrrsnr == rsnr
        assert urbr.urbrdcnt == len(urbds)
        assert [d.urbddsnr for d in urbds] == list(range(1, len(urbds) + 1))


def transactions_by_destination(
    received: list[Received], config: SimConfig
) -> dict[str, dict[str, list[Tx]]]:
    names = destination_topics(config)
    return {names[t]: rebuild(rs) for t, rs in by_topic(received).items()}
