"""The simulated Event Replicator Server: transactions in, URB messages per destination out.

Library use (tests, Spark end-to-end tests, the CLI):

    rep = Replicator(default_config(), seed=7)
    out = rep.start()                 # STRT on every destination
    out += rep.transactions(100)      # 100 transactions over all subscriptions
    out += rep.answer(request_bytes)  # reply to a TRAN/STAT/INST/OPND/CLSD request
    out += rep.terminate()            # flush and TERM
    for d in out: ...                 # Delivery: topic, key (None by default), value,
                                      # delay_ms (a connector stall)

Everything is deterministic under the seed when the clock is the default simulated one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from devtools.sim import responder
from devtools.sim.answer_faults import AnswerFaults
from devtools.sim.clock import Clock, SimClock, stck
from devtools.sim.elements import Part, TxFlags, element_size, status_part, transaction_parts
from devtools.sim.faults import WRAP_START, FaultPlan, FaultSchedule, next_tsnr
from devtools.sim.gfft import gfft_part
from devtools.sim.model import SimConfig, Subscription
from devtools.sim.outbox import Body, Delivery, Outbox
from devtools.sim.packer import Packer, minimum_message_size
from devtools.sim.payloads import CODEPAGES, layout_size
from devtools.sim.resend import ResendBuffer
from devtools.sim.transactions import Transaction, TransactionGenerator
from devtools.sim.utility import EMPTIES_FILE, UtilityEvent
from pipeline.urb import make_element

C5_DATA_LEN = 40


@dataclass
class SubscriptionState:
    """What STAT reports: the last tsnr sent and the times of that transaction."""

    tsnr: int = 0
    commit: int = 0
    processed: int = 0


class Replicator:
    """Generates, packs, numbers and sends; answers requests (see responder.py)."""

    def __init__(
        self,
        config: SimConfig,
        seed: int = 0,
        *,
        faults: FaultPlan | None = None,
        transactions: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.clock = clock or SimClock(datetime.fromisoformat(config.start_time),
                                       config.tod_offset_us)
        self.generator = TransactionGenerator(config, self.rng)
        self.faults = FaultSchedule(faults or FaultPlan(), seed, transactions)
        self.outbox = Outbox(config, self.clock)
        self.answer_faults = AnswerFaults(config)
        self.outbox.on_message = self._transport
        first = WRAP_START - 1 if faults is not None and faults.wrap else 0
        self.states = {s.name: SubscriptionState(tsnr=first) for s in config.subscriptions}
        self.buffers = {b.name: ResendBuffer(b.size) for b in config.resend_buffers}
        self.packers = {
            s.name: Packer(s.name, config.max_message_size) for s in config.subscriptions
        }
        self.index = 0
        self._current: Subscription | None = None
        self._run_left = 0
        self._armed: set[str] = set()
        self._check_sizes()

    def _check_sizes(self) -> None:
        largest = max(
            element_size("URBD", layout_size(s.layout)) for s in self.config.subscriptions
        )
        largest = max(largest, element_size("URBS", C5_DATA_LEN))
        needed = minimum_message_size(largest)
        if self.config.max_message_size < needed:
            raise ValueError(f"max message size {self.config.max_message_size} < {needed} needed")

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> list[Delivery]:
        """STRT on every destination: the replicator's initialisation (rule 14); then the
        GFFTs of ``gfft_files``."""
        return self._lifecycle("STRT") + self.gffts()

    def terminate(self) -> list[Delivery]:
        """Send what is pending, then TERM on every destination (rule 15)."""
        return self.flush() + self._lifecycle("TERM")

    def restart(self) -> list[Delivery]:
        """Abnormal end and restart: REST, numbering from 1, an empty resend buffer (rule 16)."""
        out = self.flush()
        self.outbox.restart()
        for state in self.states.values():
            state.tsnr = 0
        for buffer in self.buffers.values():
            buffer.clear()
        return out + self._lifecycle("REST") + self.gffts()

    def gffts(self) -> list[Delivery]:
        """A GFFT (URBF + URBGs of the subscription's layout) for each file of
        ``gfft_files`` a subscription replicates, created now, in a message of its own."""
        out: list[Delivery] = []
        for sub in self.config.subscriptions:
            for fnr in (f for f in self.config.gfft_files if f in sub.files_of(sub.dbid)):
                part = gfft_part(sub, fnr, stck(self.clock.now()))
                for dest in sub.destinations:
                    out += self.outbox.send(dest, sub.name, [part], sub.encoding)
        return out

    def _lifecycle(self, st: str) -> list[Delivery]:
        out: list[Delivery] = []
        names = self.config.lifecycle_names_destination
        for dest in self.config.destinations:
            part = status_part("", st, self.clock.now(), urbsdnam=dest.name if names else "")
            out += self.outbox.send(
                dest.name, dest.name, [part], self.config.destination_encoding(dest.name)
            )
        return out

    # -- the transaction stream --------------------------------------------------------------

    def transactions(self, count: int) -> list[Delivery]:
        """`count` transactions over all subscriptions, then everything pending flushed."""
        out: list[Delivery] = []
        for _ in range(count):
            out += self.step()
        return out + self.flush()

    def run(self, count: int) -> list[Delivery]:
        """A whole session: STRT, `count` transactions, TERM."""
        return self.start() + self.transactions(count) + self.terminate()

    def step(self) -> list[Delivery]:
        """One transaction of some subscription, with the faults scheduled for it."""
        index, self.index = self.index, self.index + 1
        hits = {
            k: self.faults.hits(k, index)
            for k in ("restart", "drop_continuation", "corrupt", "drop_transaction", "duplicate",
                      "redeliver", "stall")
        }
        out = self.restart() if hits["restart"] else []
        for event in self.config.utility_events:
            if event.at == index:
                out += self.utility(event)
        self._armed |= {k for k in ("drop_continuation", "corrupt", "stall") if hits[k]}
        sub, out_switch = self._pick()
        out += out_switch
        tx = self.generator.next_transaction(sub, self.clock)
        tsnr = self._commit(sub, tx)
        parts = transaction_parts(tx, tsnr, sub, self.config.replicator_id)
        if hits["drop_transaction"]:
            out += self._lose(sub, parts)
        else:
            out += self._send_bodies(sub, self.packers[sub.name].add(parts))
        if hits["duplicate"]:
            again = TxFlags(rsnd=True)
            out += self.send_transaction(sub, tx, tsnr, again, sub.destinations)
        if self.config.c5_rate and self.rng.random() < self.config.c5_rate:
            out += self.c5(sub)
        if hits["redeliver"]:
            out += self.redeliver(self.faults.choice("redeliver", self._delivered_to()))
        return out

    def redeliver(self, destination: str, count: int | None = None) -> list[Delivery]:
        """The connector re-produces the last ``count`` messages of ``destination`` (random
        up to ``redelivery_max_messages`` when None): see faults.py."""
        if count is None:
            count = self.faults.size("redeliver", self.config.redelivery_max_messages)
        return self.outbox.redeliver(destination, count)

    def _delivered_to(self) -> list[str]:
        """Destinations with messages a connector could produce again: one connector per
        destination queue, so any of them can fail, the reply destination's too."""
        return [d.name for d in self.config.destinations if self.outbox.history[d.name]]

    def _pick(self) -> tuple[Subscription, list[Delivery]]:
        """Subscriptions come in runs, so several transactions can share a message."""
        out: list[Delivery] = []
        if self._current is None or self._run_left == 0:
            previous = self._current
            self._current = self.rng.choice(self.config.subscriptions)
            self._run_left = self.rng.randint(1, self.config.subscription_run)
            if previous is not None and previous is not self._current:
                out = self.flush_subscription(previous)
        self._run_left -= 1
        return self._current, out

    def _commit(self, sub: Subscription, tx: Transaction) -> int:
        state = self.states[sub.name]
        state.tsnr = next_tsnr(state.tsnr)
        state.commit, state.processed = tx.commit, tx.processed
        if sub.resend_buffer is not None:
            self.buffers[sub.resend_buffer].keep(state.tsnr, tx)
        return state.tsnr

    def c5(self, sub: Subscription) -> list[Delivery]:
        """C5DA: user data from an Adabas C5 command, to the subscription's destinations."""
        out = self.flush_subscription(sub)
        text = f"C5 USER DATA {self.rng.randrange(10**6):06d} {sub.name}".ljust(C5_DATA_LEN)
        part = status_part(
            "",
            "C5DA",
            self.clock.now(),
            data=text.encode(CODEPAGES[sub.encoding]),
            urbssnam=sub.name,
            urbsttim=stck(self.states[sub.name].commit),
            urbsdbid=sub.dbid,
            urbsfnr=self.rng.choice(sub.files_of(sub.dbid)),
            urbsorig="A",
        )
        for dest in sub.destinations:
            out += self.outbox.send(dest, sub.name, [part], sub.encoding)
        return out

    def utility(self, event: UtilityEvent) -> list[Delivery]:
        """A utility/lifecycle status of one subscription's file, sent now (see utility.py).

        After everything the subscription sent before it, so a consumer sees it between the
        transactions committed before and after the utility (URBSTTIM orders them too).
        """
        sub = self.config.subscription(event.subscription)
        if sub is None:
            raise ValueError(f"utility event: unknown subscription {event.subscription}")
        out = self.flush_subscription(sub)
        now = stck(self.clock.advance(1))
        fields = event.urbs_fields(dbid=sub.dbid, time=now, commit=now)
        part = Part("URBS", fields, int(make_element("URBS", **fields).urbslen))
        for dest in sub.destinations:
            out += self.outbox.send(dest, sub.name, [part], sub.encoding)
        if event.utility in EMPTIES_FILE and event.fnr:
            self.generator.empty_file(sub.name, event.fnr)
        return out

    # -- sending -----------------------------------------------------------------------------

    def flush(self) -> list[Delivery]:
        """Send every subscription's open message."""
        out: list[Delivery] = []
        for sub in self.config.subscriptions:
            out += self.flush_subscription(sub)
        return out

    def flush_subscription(self, sub: Subscription) -> list[Delivery]:
        return self._send_bodies(sub, self.packers[sub.name].flush())

    def send_transaction(
        self,
        sub: Subscription,
        tx: Transaction,
        tsnr: int,
        flags: TxFlags,
        destinations: Sequence[str],
    ) -> list[Delivery]:
        """Send one transaction in messages of its own (resends, initial-state data)."""
        parts = transaction_parts(tx, tsnr, sub, self.config.replicator_id, flags)
        return self.flush_subscription(sub) + self._send_alone(sub, parts, destinations)

    def send_status(
        self, destinations: Sequence[str], key: str, part_factory: Callable[[str], Part]
    ) -> list[Delivery]:
        """One URBS message to each destination (once each), in the destination's form."""
        out: list[Delivery] = []
        for dest in dict.fromkeys(destinations):
            enc = self.config.destination_encoding(dest)
            out += self.outbox.send(dest, key, [part_factory(dest)], enc)
        return out

    def _send_alone(
        self, sub: Subscription, parts: list[Part], destinations: Sequence[str]
    ) -> list[Delivery]:
        packer = Packer(sub.name, self.config.max_message_size)
        bodies = packer.add(parts) + packer.flush()
        return self._send_bodies(sub, bodies, destinations)

    def _send_bodies(
        self, sub: Subscription, bodies: list[Body], destinations: Sequence[str] = ()
    ) -> list[Delivery]:
        out: list[Delivery] = []
        for body in bodies:
            for dest in destinations or sub.destinations:
                out += self.outbox.send(dest, sub.name, body, sub.encoding)
        return out

    def _lose(self, sub: Subscription, parts: list[Part]) -> list[Delivery]:
        """A transaction lost in transport: its messages use up msnrs but never arrive."""
        out = self.flush_subscription(sub)
        self._armed.add("lose")
        out += self._send_alone(sub, parts, sub.destinations)
        self._armed.discard("lose")
        return out

    def _transport(self, destination: str, body: Body, value: bytes) -> bytes | None:
        """The messaging system between replicator and consumer: where faults happen."""
        if "lose" in self._armed:
            return None
        if "drop_continuation" in self._armed and body[0].eye == "URBC":
            self._armed.discard("drop_continuation")
            return None
        if "stall" in self._armed and body[0].eye == "URBC":
            self._armed.discard("stall")
            self.outbox.delay_next_ms = self.config.stall_ms
        if "corrupt" in self._armed:
            self._armed.discard("corrupt")
            return self.faults.corrupt(value)
        return value

    # -- requests ----------------------------------------------------------------------------

    def answer(self, request: bytes) -> list[Delivery]:
        """Answer one request message from the input queue like the replicator does."""
        return responder.answer(self, request)

    def topic(self, destination: str) -> str:
        return self.outbox.topic(destination)

    def resend_buffer(self, sub: Subscription) -> ResendBuffer | None:
        return self.buffers.get(sub.resend_buffer) if sub.resend_buffer else None
