"""The simulator as a live replicator beside a running job (demo, end-to-end tests, benchmarks).

A background thread streams the transactions to Kafka (STRT … TERM), then keeps answering the
requests that arrive on the input topic — TRAN, STAT, INST, OPND/CLSD — until stopped, the way a
replicator answers a job's prior-transaction requests.
"""

from __future__ import annotations

import threading
import time

from devtools.sim.config import from_settings
from devtools.sim.faults import FaultPlan
from devtools.sim.load import KafkaRequests, LoadOptions, Summary, drive
from devtools.sim.outbox import Delivery
from devtools.sim.replicator import Replicator
from devtools.sim.sinks import KafkaSink
from pipeline.config import Settings


class LiveReplicator:
    """Stream ``transactions`` with ``faults``, then answer requests until :meth:`stop`."""

    def __init__(self, settings: Settings, *, transactions: int = 0, seed: int = 0,
                 faults: FaultPlan | None = None, max_message_size: int = 4096,
                 rate: float = 0.0, verbose: bool = False,
                 replicator: Replicator | None = None,
                 deliveries: list[Delivery] | None = None,
                 sim: dict[str, object] | None = None) -> None:
        """Either generate ``transactions`` here, or send pre-built ``deliveries`` made by
        ``replicator`` (tests that record what was generated) and answer for it. ``sim``:
        further simulator settings (``SimConfig`` fields)."""
        if replicator is None:
            config = from_settings(settings).model_copy(
                update={"max_message_size": max_message_size, **(sim or {})})
            replicator = Replicator(config, seed, faults=faults, transactions=transactions)
        self.replicator = replicator
        self._deliveries = deliveries
        self._settings = settings
        self._options = LoadOptions(transactions=transactions, rate=rate)
        self._verbose = verbose
        self.streamed = threading.Event()
        self.summary: Summary | None = None
        self.answered = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replicator", daemon=True)

    def start(self) -> LiveReplicator:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _say(self, text: str) -> None:
        if self._verbose:
            print(f"simulator: {text}", flush=True)

    def _run(self) -> None:
        # the conf's connection, security included (on a secured broker the replicator is
        # its own principal: pass it its own settings)
        options = self._settings.kafka.confluent()
        bootstrap = options.pop("bootstrap.servers")
        sink = KafkaSink(bootstrap, **options)
        requests = KafkaRequests(bootstrap, self._settings.topics.requests,
                                 group=f"urbpipe-sim-{time.time_ns()}", **options)
        try:
            if self._deliveries is None:
                self.summary = drive(self.replicator, sink, self._options, requests)
                self._say(f"{self.summary.line()}; now answering requests")
            else:
                sink.send(self._deliveries)
                self._say(f"sent {len(self._deliveries)} messages; now answering requests")
            self.streamed.set()
            while not self._stop.is_set():
                for request in requests.poll(0.5):
                    deliveries = self.replicator.answer(request)
                    sink.send(deliveries)
                    self.answered += 1
                    self._say(f"answered a request with {len(deliveries)} message(s)")
                sink.pump()  # a lagging topic's held messages that are due
        except BaseException as exc:  # surfaced to the caller through .error
            self.error = exc
            self.streamed.set()
        finally:
            sink.close()
            requests.close()
