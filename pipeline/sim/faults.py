"""Fault injection, deterministic under the seed.

Faults come from their own random stream, so asking for one changes only what that fault
touches: the clean transactions, their payloads and times stay byte-identical otherwise.

- drop_transaction: a whole transaction's messages are lost in transport (tsnr and msnr gap;
  the transaction stays in the resend buffer, so a TRAN request can recover it).
- drop_continuation: the next continuation message (one starting with URBC) is lost on one
  destination (msnr gap, the transaction is incomplete).
- duplicate: a transaction is delivered a second time with URBTRSND/URBRRSND='Y'.
- restart: the replicator ends abnormally and restarts: REST on every destination, message
  and transaction numbering start again at 1, the resend buffer is empty.
- corrupt: the next message sent has some of its bytes damaged.
- redeliver: the MQ source connector re-produces its last batch of one destination: the last
  k messages (1 <= k <= ``SimConfig.redelivery_max_messages``) again, byte for byte (same
  URBHMSNR, URBHTIME and key), unflagged, right after the last one delivered there.
- stall: the connector holds the next continuation message (one starting with URBC) for
  ``SimConfig.stall_ms`` before producing it (``Delivery.delay_ms``); the replicator sent it
  on time, so its URBHTIME is unchanged.
- wrap: numbering starts just below 2**32-1, so tsnrs wrap around to 1 (0 is reserved).

The redelivery model: a Kafka Connect source task is at-least-once. The IBM MQ source
connector (ibm-messaging/kafka-connect-mq-source) reads messages in a transacted JMS session
and commits it only after Kafka acknowledged the records; a task that fails in between
leaves the session rolled back, and MQ gives the same messages to the next task, which
produces them again — after the ones that did reach Kafka. Kafka Connect also runs its
producers without idempotence by default (KAFKA-13759), so a retried send may be duplicated
or overtake the next one. Byte-identical copies far behind the live stream are therefore
normal input, not corruption.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

KINDS = ("drop_transaction", "drop_continuation", "duplicate", "restart", "corrupt",
         "redeliver", "stall")
MAX_TSNR = 0xFFFFFFFF
WRAP_START = MAX_TSNR - 2  # the third transaction of each subscription is 4294967295


def next_tsnr(tsnr: int) -> int:
    """The tsnr after this one: 1 follows 4294967295, because 0 means initial state."""
    return 1 if tsnr >= MAX_TSNR else tsnr + 1


@dataclass(frozen=True)
class FaultPlan:
    """What to inject: exact counts over a bounded run, or rates per transaction."""

    counts: Mapping[str, int] = field(default_factory=dict)
    rates: Mapping[str, float] = field(default_factory=dict)
    wrap: bool = False

    def __post_init__(self) -> None:
        unknown = (set(self.counts) | set(self.rates)) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds: {sorted(unknown)}")

    @property
    def any(self) -> bool:
        return any(self.counts.values()) or any(self.rates.values()) or self.wrap


class FaultSchedule:
    """Answers 'does fault X hit transaction i?' for one run; i counts from 0."""

    def __init__(self, plan: FaultPlan, seed: int, transactions: int | None) -> None:
        self._plan = plan
        self._seed = seed
        self._sizes: dict[str, random.Random] = {}
        self.rng = random.Random(f"{seed}/faults")
        self._hits: dict[str, set[int]] = {}
        self._streams = {kind: random.Random(f"{seed}/faults/{kind}") for kind in KINDS}
        for kind in KINDS:
            count = plan.counts.get(kind, 0)
            if count:
                self._hits[kind] = self._spread(kind, count, transactions)

    def _spread(self, kind: str, count: int, transactions: int | None) -> set[int]:
        if transactions is None:
            raise ValueError("fault counts need a bounded number of transactions")
        first = 1 if kind == "restart" else 0  # a restart right after STRT shows nothing
        candidates = range(first, max(transactions, first))
        return set(self._streams[kind].sample(candidates, min(count, len(candidates))))

    def size(self, kind: str, top: int) -> int:
        """A size in 1..top for a fault that hit (how many messages a redelivery repeats),
        from its own stream so that it changes nothing else."""
        return self._sizes.setdefault(kind, random.Random(f"{self._seed}/size/{kind}")
                                      ).randint(1, top)

    def hits(self, kind: str, index: int) -> bool:
        if kind in self._hits:
            return index in self._hits[kind]
        rate = self._plan.rates.get(kind, 0.0)
        return rate > 0 and self._streams[kind].random() < rate

    def corrupt(self, message: bytes) -> bytes:
        """Damage a message: a garbled eye-catcher, a wrong length, or a truncation."""
        data = bytearray(message)
        mode = self.rng.choice(("eye", "length", "truncate", "bytes"))
        if mode == "eye":
            at = self.rng.choice(_element_offsets(message))
            data[at : at + 4] = b"\xde\xad\xbe\xef"
        elif mode == "length":
            data[12:16] = (len(message) + self.rng.randint(1, 4096)).to_bytes(4, "big")
        elif mode == "truncate":
            del data[self.rng.randint(64, max(64, len(message) - 1)) :]
        else:
            for _ in range(self.rng.randint(1, 4)):
                data[self.rng.randrange(len(data))] ^= 0xFF
        return bytes(data)


def _element_offsets(message: bytes) -> list[int]:
    """Where the elements after the URBH start, walking their length fields (either order)."""
    big = message[10:12] == b"\x00\x01"
    offsets, at = [], 64
    while at + 8 <= len(message):
        offsets.append(at)
        length = int.from_bytes(message[at + 4 : at + 8], "big" if big else "little")
        if length <= 0:
            break
        at += length
    return offsets or [0]
