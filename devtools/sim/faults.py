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
  URBHMSNR, URBHTIME and key), unflagged, right after the last one delivered there. Each
  destination's queue has a connector of its own, so the destination is drawn (its own
  stream) among all that have had messages, the reply destination included.
- stall: the connector holds the next continuation message (one starting with URBC) for
  ``SimConfig.stall_ms`` before producing it (``Delivery.delay_ms``); the replicator sent it
  on time, so its URBHTIME is unchanged.
- wrap: numbering starts just below 2**32-1, so tsnrs wrap around to 1 (0 is reserved).

The redelivery model: a Kafka Connect source task is at-least-once. What the IBM MQ source
connector does (github ibm-messaging/kafka-connect-mq-source, src/main/java/com/ibm/
eventstreams/connect/mqsource/, read at commit 81407a4):
- JMSWorker.java: the task reads with ``createContext(..., JMSContext.SESSION_TRANSACTED)``,
  "adding messages to the current transaction until told to commit"; ``commit()`` and
  ``attemptRollback()`` end that MQ unit of work.
- MQSourceTask.java: ``poll()`` returns up to ``mq.batch.size`` messages (MQSourceConnector:
  default 250, "A batch uses a single unit of work") and the next ``internalPoll()`` commits
  MQ only in ``waitForKafkaThenCommitMQ()``, after every record's ``commitRecord`` callback
  (Kafka acknowledged it). A batch Kafka does not acknowledge in time ends in
  ``ConnectException("Missing commits for message batch")``; a failed or stopped task closes
  its JMS context with the unit of work open, so MQ rolls it back and gives the same
  messages (same bytes, same MsgId; only the backout count moves) to the next task, which
  produces them again after the ones of that batch that did reach Kafka. Exactly-once
  needs ``mq.exactly.once.state.queue`` and Connect's exactly-once support, neither of
  which is the default.
- builders/BaseRecordBuilder.java ``getKey``: ``mq.record.builder.key.header`` unset means
  ``KeyHeader.NONE`` and a null key; ``JMSMessageID`` gives the message id (as the JMS
  string without its ``ID:`` prefix, i.e. the 24-byte MQMD.MsgId as 48 hex characters —
  the simulator's ``msgid`` key, outbox.py; one key per message, routing nothing).
Kafka Connect also runs its producers without idempotence by default (KAFKA-13759,
apache/kafka#11933), so a retried send may be duplicated as well.

The simulator's ``redeliver`` repeats the last k messages of one destination right after the
last one delivered there, byte for byte and unflagged; k goes up to
``redelivery_max_messages`` (default 2000: a connector configured with a larger
``mq.batch.size``, or several failed batches in a row), so copies reach thousands of
transactions behind the live stream: normal input, not corruption.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
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
        self._choices: dict[str, random.Random] = {}
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

    def choice(self, kind: str, options: Sequence[str]) -> str:
        """Which of ``options`` a fault that hit touches (the destination whose connector
        redelivers), from its own stream so that it changes nothing else."""
        return self._choices.setdefault(kind, random.Random(f"{self._seed}/choice/{kind}")
                                        ).choice(options)

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
