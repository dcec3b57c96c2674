"""Gap lifecycle: open → requested (retried with backoff) → filled | unrecoverable.

A ``Gap`` is a contiguous range of missing tsnrs in unwrapped positions. It only keeps the
positions it can still ask for (at most ``max_requests_per_gap``), so its size is bounded.
Every transition returns the event that describes it; the events carry the gap's running
totals so table rows can be built from the events alone.

Retry rounds run on processing time, but running out of them is no proof: a job lagging far
behind its topic may not have read the resend yet, queued behind the lag. So the verdict
"unrecoverable" waits for evidence — a processed message of the key sent (URBHTIME) after the
last request (a resend travels the same topic and partition, so it would have come first) —
or for ``verdict_wait_ms`` to pass (an idle subscription sends nothing to prove it).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    GapEvent,
    GapFilled,
    GapOpened,
    GapRequested,
    GapUnrecoverable,
)
from pipeline.reassembly.sequence import to_tsnr

TOD_TO_UNIX_MS = 2_208_988_800_000  # 1900-01-01 (the STCK epoch) to 1970-01-01
TRSP_SUBCODES = {
    34: "no resend buffer for the subscription",
    35: "transaction not in the resend buffer",
    36: "subscription inactive",
    37: "invalid prior-transaction request",
}


@dataclass(slots=True)
class Gap:
    """One open gap. ``missing`` holds unwrapped positions still wanted, ascending."""

    epoch: int
    from_u: int
    to_u: int
    missing: list[int]
    reason: str
    opened_ms: int
    state: str = "open"
    requests_sent: int = 0
    rounds: int = 0
    next_retry_ms: int | None = None
    hold_until_ms: int | None = None
    last_request_ms: int | None = None  # when the last request round was sent
    verdict_due_ms: int | None = None   # retries ran out: unrecoverable at the latest then

    @property
    def gap_id(self) -> str:
        return f"{self.epoch}:{self.from_u}"

    def to_obj(self) -> list:
        return [self.epoch, self.from_u, self.to_u, self.missing, self.reason, self.opened_ms,
                self.state, self.requests_sent, self.rounds, self.next_retry_ms,
                self.hold_until_ms, self.last_request_ms, self.verdict_due_ms]

    @classmethod
    def from_obj(cls, obj: list) -> Gap:
        """From ``to_obj``; lists saved before a field was added leave it at its default."""
        return cls(*obj[:3], list(obj[3]), *obj[4:])


def gap_event(cls: type[GapEvent], gap: Gap, key: tuple[str, str], now_ms: int,
              reason: str | None = None, **extra: object) -> GapEvent:
    """Build any gap event from the gap's current totals."""
    destination, subscription = key
    return cls(
        subscription=subscription, destination=destination, epoch=gap.epoch,
        gap_id=gap.gap_id, from_tsnr=to_tsnr(gap.from_u), to_tsnr=to_tsnr(gap.to_u),
        missing=tuple(to_tsnr(u) for u in gap.missing), requests_sent=gap.requests_sent,
        opened_at_ms=gap.opened_ms, reason=gap.reason if reason is None else reason,
        at_ms=now_ms, **extra,
    )


def open_gap(from_u: int, to_u: int, epoch: int, reason: str, now_ms: int,
             config: ReassemblyConfig, key: tuple[str, str],
             request: bool = True) -> tuple[list[Gap], list[GapEvent]]:
    """Open a gap and send its first request round (unless ``request`` is False).

    A range wider than the request cap is split: the newest ``max_requests_per_gap`` tsnrs
    (the ones the circular resend buffer most likely still holds) are requested, the older
    part is reported and closed as unrecoverable straight away.
    """
    cap = config.max_requests_per_gap
    events: list[GapEvent] = []
    if to_u - from_u + 1 > cap:
        old = Gap(epoch, from_u, to_u - cap, [], reason, now_ms)
        events.append(gap_event(GapOpened, old, key, now_ms))
        events.append(gap_event(GapUnrecoverable, old, key, now_ms,
                                f"wider than max_requests_per_gap ({cap}): not requested"))
        from_u = to_u - cap + 1
    hold = now_ms + config.hold_timeout_ms if config.landing_policy == "hold" else None
    gap = Gap(epoch, from_u, to_u, list(range(from_u, to_u + 1)), reason, now_ms,
              hold_until_ms=hold)
    events.append(gap_event(GapOpened, gap, key, now_ms))
    if request:
        events.append(request_round(gap, now_ms, config, key))
    return [gap], events


def request_round(gap: Gap, now_ms: int, config: ReassemblyConfig,
                  key: tuple[str, str]) -> GapEvent:
    """Ask again for every tsnr still missing and arm the next retry."""
    gap.rounds += 1
    gap.requests_sent += len(gap.missing)
    gap.state = "requested"
    gap.last_request_ms = now_ms
    gap.next_retry_ms = now_ms + config.backoff_ms(gap.rounds)
    return gap_event(
        GapRequested, gap, key, now_ms, tsnrs=tuple(to_tsnr(u) for u in gap.missing),
        attempt=gap.rounds, token=config.request_token,
        reply_destination=config.reply_destination,
    )


def fill(gap: Gap, u: int, now_ms: int, key: tuple[str, str]) -> GapEvent | None:
    """Mark position ``u`` as arrived; returns GapFilled when nothing is missing any more."""
    gap.missing.remove(u)
    if gap.missing:
        return None
    return gap_event(GapFilled, gap, key, now_ms, reason="")


def retry_due(gap: Gap, now_ms: int, config: ReassemblyConfig, key: tuple[str, str],
              newest_sent_ms: int | None = None) -> GapEvent | None:
    """At a retry deadline another request round; once retries ran out, the verdict.

    ``newest_sent_ms``: the newest URBHTIME (Unix ms) of the key's data messages processed.
    """
    if gap.next_retry_ms is not None and now_ms >= gap.next_retry_ms:
        if gap.rounds <= config.max_retries:
            return request_round(gap, now_ms, config, key)
        gap.next_retry_ms = None
        gap.verdict_due_ms = now_ms + config.verdict_wait_ms
    return verdict(gap, now_ms, config, key, newest_sent_ms)


def verdict(gap: Gap, now_ms: int, config: ReassemblyConfig, key: tuple[str, str],
            newest_sent_ms: int | None) -> GapEvent | None:
    """Retries ran out: unrecoverable once there is evidence, or at ``verdict_due_ms``."""
    if gap.verdict_due_ms is None:
        return None
    if sent_after_last_request(gap, newest_sent_ms, config):
        why = "messages sent after the last request arrived without the missing ones"
    elif now_ms >= gap.verdict_due_ms:
        why = f"no message sent after the last request arrived in {config.verdict_wait_ms} ms"
    else:
        return None
    gap.verdict_due_ms = None
    return gap_event(GapUnrecoverable, gap, key, now_ms,
                     f"retries exhausted after {gap.rounds} request rounds; {why}")


def sent_after_last_request(gap: Gap, newest_sent_ms: int | None,
                            config: ReassemblyConfig) -> bool:
    """Evidence: a message the replicator sent after our last request has been processed
    (by more than ``clock_skew_ms``, as the replicator's clock is not the job's)."""
    return (newest_sent_ms is not None and gap.last_request_ms is not None
            and newest_sent_ms > gap.last_request_ms + config.clock_skew_ms)


def stck_to_unix_ms(stck: int) -> int | None:
    """A STCK value (URBHTIME) as Unix milliseconds; None when not set."""
    return (stck >> 12) // 1000 - TOD_TO_UNIX_MS if stck else None


def trsp_reason(tsnr: int, rsp: int, subcode: int) -> str:
    meaning = TRSP_SUBCODES.get(subcode, "error")
    return f"TRSP for tsnr {tsnr}: response {rsp} subcode {subcode} ({meaning})"


def find(gaps: list[Gap], u: int) -> Gap | None:
    """The open gap still waiting for position ``u``."""
    return next((g for g in gaps if u in g.missing), None)


def hold_barrier(gaps: list[Gap]) -> int | None:
    """The lowest position a hold-policy gap still waits for; later transactions wait too."""
    waiting = [g.missing[0] for g in gaps if g.hold_until_ms is not None and g.missing]
    return min(waiting, default=None)
