"""Gap lifecycle: open → requested (retried with backoff) → filled | unrecoverable.

A ``Gap`` is a contiguous range of missing tsnrs in unwrapped positions. It only keeps the
positions it can still ask for (at most ``max_requests_per_gap``), so its size is bounded.
Each position ends on its own: *filled* when its transaction lands, *settled* when the job
stops waiting for it (a TRSP error for that tsnr, the verdict after the last request round,
a restart …). A TRSP error about one tsnr says nothing about the others: the resend buffer is
circular (R10), so the oldest tsnrs of a gap may be overwritten while newer ones are
still there and do arrive. The gap ends when every position is filled or settled; its last
event says which. A position waiting for its subscription's reactivation (TRSP 36) is
*parked*: no request rounds, asked again when a SUBS or REAC shows the subscription active.

A position the replicator *confirmed* (TRSP response 0: R11 answers a successful
prior-transaction request with a status to the reply destination) is being resent: it is
asked again only ``confirmed_wait_ms`` after the confirmation (a resend can take long: the
data topic may lag the reply topic), and no verdict settles it before then.

Retry rounds run on processing time, but running out of them is no proof: a job lagging far
behind its topic may not have read the resend yet, queued behind the lag. So the verdict
"unrecoverable" waits for evidence — a processed message of the destination sent (URBHTIME)
after the last request (a resend travels the same topic and partition, so it would have come
first) — or for ``verdict_wait_ms`` to pass (an idle subscription sends nothing to prove it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.reassembly.config import ReassemblyConfig
from pipeline.reassembly.events import (
    GapEvent,
    GapFilled,
    GapOpened,
    GapRequested,
    GapUnrecoverable,
)
from pipeline.reassembly.sequence import to_tsnr
from pipeline.urb.codes import describe_subcode

TOD_TO_UNIX_MS = 2_208_988_800_000  # 1900-01-01 (the STCK epoch) to 1970-01-01


@dataclass(slots=True)
class Gap:
    """One open gap. ``missing`` holds unwrapped positions still asked for, ascending;
    ``parked`` those waiting for a reactivation; ``filled``/``settled`` the ended ones."""

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
    filled: list[int] = field(default_factory=list)
    settled: list[int] = field(default_factory=list)
    parked: list[int] = field(default_factory=list)
    why: list[str] = field(default_factory=list)  # distinct reasons positions were settled
    #: position -> when (job time) a TRSP response 0 confirmed its resend
    confirmed: dict[int, int] = field(default_factory=dict)

    @property
    def gap_id(self) -> str:
        return f"{self.epoch}:{self.from_u}"

    @property
    def done(self) -> bool:
        return not self.missing and not self.parked

    def waits_for(self, u: int) -> bool:
        return u in self.missing or u in self.parked

    def to_obj(self) -> list:
        return [self.epoch, self.from_u, self.to_u, self.missing, self.reason, self.opened_ms,
                self.state, self.requests_sent, self.rounds, self.next_retry_ms,
                self.hold_until_ms, self.last_request_ms, self.verdict_due_ms, self.filled,
                self.settled, self.parked, self.why,
                [[u, ms] for u, ms in self.confirmed.items()]]

    @classmethod
    def from_obj(cls, obj: list) -> Gap:
        """From ``to_obj``; lists saved before a field was added leave it at its default."""
        gap = cls(*obj[:3], list(obj[3]), *obj[4:13])
        for name, value in zip(("filled", "settled", "parked", "why"), obj[13:], strict=False):
            setattr(gap, name, list(value))
        if len(obj) > 17:
            gap.confirmed = dict(obj[17])
        return gap

    def waiting_ms(self, u: int, config: ReassemblyConfig) -> int | None:
        """Until when a confirmed position waits for its resend (None: not confirmed)."""
        at = self.confirmed.get(u)
        return None if at is None else at + config.confirmed_wait_ms


def gap_event(cls: type[GapEvent], gap: Gap, key: tuple[str, str], now_ms: int,
              reason: str | None = None, **extra: object) -> GapEvent:
    """Build any gap event from the gap's current totals."""
    destination, subscription = key
    return cls(
        subscription=subscription, destination=destination, epoch=gap.epoch,
        gap_id=gap.gap_id, from_tsnr=to_tsnr(gap.from_u), to_tsnr=to_tsnr(gap.to_u),
        missing=tuple(to_tsnr(u) for u in gap.missing + gap.parked),
        requests_sent=gap.requests_sent, opened_at_ms=gap.opened_ms,
        reason=gap.reason if reason is None else reason, at_ms=now_ms,
        filled=tuple(to_tsnr(u) for u in gap.filled),
        settled=tuple(to_tsnr(u) for u in gap.settled), **extra,
    )


@dataclass(frozen=True, slots=True)
class Opening:
    """What opening a gap produced: the gap to track (None when nothing can be asked for),
    its events, and the range settled at once because it was too wide to ask for."""

    gap: Gap | None
    events: list[GapEvent]
    settled: tuple[int, int, str] | None  # (from_u, to_u, gap_id)


def open_gap(from_u: int, to_u: int, epoch: int, reason: str, now_ms: int,
             config: ReassemblyConfig, key: tuple[str, str], request: bool = True) -> Opening:
    """Open a gap and send its first request round (unless ``request`` is False).

    A range wider than the request cap is split: the newest ``max_requests_per_gap`` tsnrs
    (the ones the circular resend buffer most likely still holds) are requested, the older
    part is reported and settled straight away (a late fill may still land it).
    """
    cap = config.max_requests_per_gap
    events: list[GapEvent] = []
    settled = None
    if to_u - from_u + 1 > cap:
        old = Gap(epoch, from_u, to_u - cap, [], reason, now_ms)
        why = f"wider than max_requests_per_gap ({cap}): not requested"
        events.append(gap_event(GapOpened, old, key, now_ms))
        events.append(gap_event(GapUnrecoverable, old, key, now_ms, why))
        settled = (from_u, to_u - cap, old.gap_id)
        from_u = to_u - cap + 1
    hold = now_ms + config.hold_timeout_ms if config.landing_policy == "hold" else None
    gap = Gap(epoch, from_u, to_u, list(range(from_u, to_u + 1)), reason, now_ms,
              hold_until_ms=hold)
    events.append(gap_event(GapOpened, gap, key, now_ms))
    first = request_round(gap, now_ms, config, key) if request else None
    if first is not None:
        events.append(first)
    return Opening(gap, events, settled)


def request_round(gap: Gap, now_ms: int, config: ReassemblyConfig,
                  key: tuple[str, str]) -> GapEvent | None:
    """Ask again for every tsnr still missing whose resend is not confirmed (or whose
    confirmation is older than ``confirmed_wait_ms``) and arm the next retry. None when
    every missing one is confirmed: the next retry is then when the first wait ends."""
    asked = [u for u in gap.missing if not _waiting(gap, u, now_ms, config)]
    if not asked:
        gap.next_retry_ms = min(_until(gap, u, config) for u in gap.missing)
        return None
    for u in asked:
        gap.confirmed.pop(u, None)  # asked again: only a new TRSP 0 confirms it
    gap.rounds += 1
    gap.requests_sent += len(asked)
    gap.state = "requested"
    gap.last_request_ms = now_ms
    gap.next_retry_ms = now_ms + config.backoff_ms(gap.rounds)
    gap.verdict_due_ms = None
    return gap_event(
        GapRequested, gap, key, now_ms, tsnrs=tuple(to_tsnr(u) for u in asked),
        attempt=gap.rounds, token=config.request_token,
        reply_destination=config.reply_destination,
    )


def confirm(gap: Gap, u: int, now_ms: int) -> None:
    """A TRSP response 0 for position ``u``: the replicator is resending it."""
    if u in gap.missing:
        gap.confirmed[u] = now_ms


def _until(gap: Gap, u: int, config: ReassemblyConfig) -> int:
    until = gap.waiting_ms(u, config)
    assert until is not None
    return until


def _waiting(gap: Gap, u: int, now_ms: int, config: ReassemblyConfig) -> bool:
    """Position ``u``'s resend is confirmed and its wait has not ended."""
    until = gap.waiting_ms(u, config)
    return until is not None and now_ms < until


def fill(gap: Gap, u: int, now_ms: int, key: tuple[str, str]) -> GapEvent | None:
    """Position ``u`` arrived; returns the gap's end event when nothing is awaited any more."""
    _take(gap, u)
    gap.filled.append(u)
    return end_event(gap, now_ms, key)


def settle(gap: Gap, u: int, why: str, now_ms: int, key: tuple[str, str]) -> GapEvent | None:
    """Stop waiting for position ``u``; returns the gap's end event when it was the last."""
    _take(gap, u)
    gap.settled.append(u)
    if why not in gap.why:
        gap.why.append(why)
    return end_event(gap, now_ms, key)


def settle_all(gap: Gap, why: str, now_ms: int, key: tuple[str, str]) -> GapEvent:
    """Stop waiting for every position still awaited; the gap ends."""
    for u in list(gap.missing + gap.parked):
        settle(gap, u, why, now_ms, key)
    event = end_event(gap, now_ms, key)
    assert event is not None
    return event


def _take(gap: Gap, u: int) -> None:
    gap.confirmed.pop(u, None)
    if u in gap.missing:
        gap.missing.remove(u)
    else:
        gap.parked.remove(u)
    if not gap.missing:
        gap.next_retry_ms = gap.verdict_due_ms = None


def end_event(gap: Gap, now_ms: int, key: tuple[str, str]) -> GapEvent | None:
    """The gap's last event once nothing is awaited: filled when every position came,
    unrecoverable when at least one was settled (its reason says which and why)."""
    if not gap.done:
        return None
    if not gap.settled:
        return gap_event(GapFilled, gap, key, now_ms, reason="")
    lost = [to_tsnr(u) for u in sorted(gap.settled)]
    came = f"; filled: {_short(sorted(to_tsnr(u) for u in gap.filled))}" if gap.filled else ""
    why = f"lost: {_short(lost)} ({'; '.join(gap.why)}){came}"
    return gap_event(GapUnrecoverable, gap, key, now_ms, why)


def park(gap: Gap, u: int) -> None:
    """Position ``u`` waits for its subscription's reactivation (TRSP 36): no rounds."""
    if u in gap.missing:
        gap.missing.remove(u)
        gap.parked.append(u)
        if not gap.missing:
            gap.next_retry_ms = gap.verdict_due_ms = None


def unpark(gap: Gap) -> bool:
    """Parked positions become requestable again; True when there were any."""
    if not gap.parked:
        return False
    gap.missing = sorted(gap.missing + gap.parked)
    gap.parked = []
    return True


def retry_due(gap: Gap, now_ms: int, config: ReassemblyConfig, key: tuple[str, str],
              newest_sent_ms: int | None = None) -> GapEvent | None:
    """At a retry deadline another request round; once retries ran out, the verdict.

    ``newest_sent_ms``: the newest URBHTIME (Unix ms, UTC) seen on the key's destination.
    """
    if gap.next_retry_ms is not None and now_ms >= gap.next_retry_ms:
        if gap.rounds <= config.max_retries:
            return request_round(gap, now_ms, config, key)
        gap.next_retry_ms = None
        gap.verdict_due_ms = now_ms + config.verdict_wait_ms
    return verdict(gap, now_ms, config, key, newest_sent_ms)


def verdict(gap: Gap, now_ms: int, config: ReassemblyConfig, key: tuple[str, str],
            newest_sent_ms: int | None) -> GapEvent | None:
    """Retries ran out: the missing positions are settled once there is evidence, or at
    ``verdict_due_ms``. Parked positions wait on (a reactivation will ask again), and so do
    confirmed ones until their wait ends (their resend is on its way)."""
    if gap.verdict_due_ms is None or not gap.missing:
        return None
    if sent_after_last_request(gap, newest_sent_ms, config):
        why = "messages sent after the last request arrived without the missing ones"
    elif now_ms >= gap.verdict_due_ms:
        why = f"no message sent after the last request arrived in {config.verdict_wait_ms} ms"
    else:
        return None
    lost = [u for u in gap.missing if not _waiting(gap, u, now_ms, config)]
    waiting = [_until(gap, u, config) for u in gap.missing if u not in lost]
    gap.verdict_due_ms = min(waiting) if waiting else None
    why = f"retries exhausted after {gap.rounds} request rounds; {why}"
    event = None
    for u in lost:
        event = settle(gap, u, why, now_ms, key)
    return event


def sent_after_last_request(gap: Gap, newest_sent_ms: int | None,
                            config: ReassemblyConfig) -> bool:
    """Evidence: a message the replicator sent after our last request has been processed
    (by more than ``clock_skew_ms``, as the replicator's clock is not the job's)."""
    return (newest_sent_ms is not None and gap.last_request_ms is not None
            and newest_sent_ms > gap.last_request_ms + config.clock_skew_ms)


def stck_to_unix_ms(stck: int) -> int | None:
    """A STCK value (URBHTIME) as Unix milliseconds, TOD clock taken as UTC; None when not
    set. The machine converts with ``ReassemblyConfig.stck_ms`` (the configured clock)."""
    return (stck >> 12) // 1000 - TOD_TO_UNIX_MS if stck else None


def trsp_reason(tsnr: int, rsp: int, subcode: int) -> str:
    meaning = describe_subcode(rsp, subcode) or "error"
    return f"TRSP for tsnr {tsnr}: response {rsp} subcode {subcode} ({meaning})"


def find(gaps: list[Gap], u: int) -> Gap | None:
    """The open gap still waiting for position ``u`` (asked for or parked)."""
    return next((g for g in gaps if g.waits_for(u)), None)


def hold_barrier(gaps: list[Gap]) -> int | None:
    """The lowest position a hold-policy gap still waits for; later transactions wait too."""
    waiting = [min(g.missing + g.parked) for g in gaps
               if g.hold_until_ms is not None and (g.missing or g.parked)]
    return min(waiting, default=None)


def _short(values: list[int], shown: int = 8) -> str:
    text = ", ".join(map(str, values[:shown]))
    return text + (f" … ({len(values)} in all)" if len(values) > shown else "")
