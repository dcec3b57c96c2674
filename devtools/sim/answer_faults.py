"""What happens to the replicator's answers to requests on a bad day (``SimConfig`` keys).

- ``inst_max_requests`` (IMAXREQ): each INST request the replicator takes is in progress for
  ``inst_busy_ms`` of its clock; one arriving while that many are in progress is refused with
  INST/ERRO response 131 subcode 44 ("Too many initial-state requests are active at once",
  ``pipeline.urb.codes``) and nothing else: the job must ask again later.
- ``inst_lost_message``: the first ``inst_lost_answers`` INST answers lose one data message in
  transport on the subscription's first destination (its URBHMSNR is used up, as with any
  message lost between the replicator and Kafka): ``first``, a ``middle`` one or the ``last``
  of the answer's pseudo-transaction messages, or ``single``: the first pseudo-transaction
  sent in one message, so a whole pseudo-transaction (tsnr 0) is gone. The INIT/CMPL statuses
  arrive, so the answer looks complete unless the job counts what it got. Answers after those
  are whole: the re-asked request completes.
- ``resend_delay_ms`` (applied by the responder's TRAN answer): the TRSP with response 0 goes
  to the reply destination at once (seed 000: "a status message (URBS) will be sent to that
  destination for successful prior-transaction requests"), the resend reaches the output
  topics that much later (their connector lags: ``Delivery.lag_ms``).

One instance per replicator; deterministic (no random choice: the rules above pick).
"""

from __future__ import annotations

from collections.abc import Sequence

from devtools.sim.model import SimConfig
from devtools.sim.outbox import Delivery, Outbox
from pipeline.urb import UrbFormatError, decode_message

#: INST/ERRO subcode: too many initial-state requests in progress (IMAXREQ).
TOO_MANY_REQUESTS = 44


class AnswerFaults:
    """The state the faults above need: requests in progress, losses still to make."""

    def __init__(self, config: SimConfig) -> None:
        self._config = config
        self._losses_left = config.inst_lost_answers if config.inst_lost_message else 0
        self._busy_until: list[int] = []  # replicator clock, µs: one per INST in progress
        self.refused = 0  # INST requests answered with 131/44
        self.lost: list[Delivery] = []  # messages lost from INST answers, in order

    def inst_refused(self, now: int) -> bool:
        """Is a new INST request refused (IMAXREQ reached)? Otherwise it is taken now."""
        self._busy_until = [t for t in self._busy_until if t > now]
        limit = self._config.inst_max_requests
        if limit and len(self._busy_until) >= limit:
            self.refused += 1
            return True
        self._busy_until.append(now + self._config.inst_busy_ms * 1000)
        return False

    def lose_inst_message(self, outbox: Outbox, deliveries: list[Delivery],
                          destination: str) -> list[Delivery]:
        """The answer as it reaches Kafka: one data message to ``destination`` less while
        losses are left (``inst_lost_message``)."""
        if not self._losses_left:
            return deliveries
        topic = outbox.topic(destination)
        data = [d for d in deliveries if d.topic == topic and _data_eye(d.value) is not None]
        victim = _pick(self._config.inst_lost_message or "", data)
        if victim is None:
            return deliveries
        self._losses_left -= 1
        self.lost.append(victim)
        outbox.forget(destination, victim)
        return [d for d in deliveries if d is not victim]


def _pick(which: str, data: Sequence[Delivery]) -> Delivery | None:
    if not data:
        return None
    if which == "first":
        return data[0]
    if which == "middle":
        return data[len(data) // 2]
    if which == "last":
        return data[-1]
    return next((d for d in data if _data_eye(d.value) == "URBT" and _whole(d.value)), None)


def _data_eye(message: bytes) -> str | None:
    """URBT or URBC when the message carries transaction data (a status: None)."""
    eyes = _eyes(message)
    return eyes[0] if eyes and eyes[0] in ("URBT", "URBC") else None


def _whole(message: bytes) -> bool:
    """Does the message hold a whole transaction (its URBT and its URBE)?"""
    eyes = _eyes(message)
    return "URBT" in eyes and "URBE" in eyes


def _eyes(message: bytes) -> list[str]:
    try:
        return [e.eye for e in decode_message(message).elements]
    except UrbFormatError:
        return []
