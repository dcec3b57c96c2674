"""Settings of the reassembly machine (policy, caps, retry timing), validated once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

LANDING_POLICIES = ("immediate", "hold")


@dataclass(frozen=True, slots=True)
class InitialStateTarget:
    """An ISN-list initial-state definition the job may ask to re-read records of a file.

    It covers the files ``files`` — (dbid, fnr) pairs, a subscription may span databases —
    for the records of ``subscription`` (conf: the subscription's ``initial_state`` and
    ``files``). The job always sends an ISN list, so the definition must select by ISN list
    (a "select all" definition answers an ISN list with INST/ERRO, response 131 subcode 15).
    """

    subscription: str
    name: str
    files: tuple[tuple[int, int], ...]
    destinations: tuple[str, ...] = ()  # the subscription's, in conf order

    def covers(self, dbid: int, fnr: int) -> bool:
        return (dbid, fnr) in self.files

    def token_for(self, destination: str, request_token: str) -> str:
        """The token of the job's INST requests from ``destination``'s key.

        An INST reply names the definition, database, file and token, but neither subscription
        nor destination, and INST/ERRO goes to the reply destination only: the token must say
        which (destination, subscription) asked. It is the job's token (first 7 characters)
        and the destination's place in the subscription's list (1 … 9, A … Z), so a request
        sent by hand with the plain token never settles one of the job's.
        """
        place = self.destinations.index(destination) + 1 if destination in self.destinations \
            else 0
        return f"{request_token[:7]}{_PLACES[place]}"


_PLACES = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_TOD_UNIX_US = 2_208_988_800_000_000  # 1900-01-01 (the TOD epoch) to 1970-01-01, in µs
MAX_INST_DESTINATIONS = len(_PLACES) - 1


@dataclass(frozen=True, slots=True)
class InitialStateRoutes:
    """Where INST replies go (they name the definition and token, never the subscription),
    worked out once from the job's targets. A definition named by two subscriptions is left
    out of both: its replies cannot be told apart and keep their destination-wide key.

    - ``by_name``: definition name → the one subscription that names it;
    - ``replies``: (definition name, token) of the job's INST requests → the (destination,
      subscription) key that sends them.
    """

    by_name: Mapping[str, str]
    replies: Mapping[tuple[str, str], tuple[str, str]]


def initial_state_routes(targets: Iterable[InitialStateTarget], request_token: str
                         ) -> InitialStateRoutes:
    targets = list(targets)
    names = [t.name for t in targets]
    unique = [t for t in targets if names.count(t.name) == 1]
    return InitialStateRoutes(
        {t.name: t.subscription for t in unique},
        {(t.name, t.token_for(d, request_token)): (d, t.subscription)
         for t in unique for d in t.destinations})


def inst_reply_routes(targets: Iterable[InitialStateTarget], request_token: str
                      ) -> dict[tuple[str, str], tuple[str, str]]:
    """``InitialStateRoutes.replies`` alone."""
    return dict(initial_state_routes(targets, request_token).replies)


@dataclass(frozen=True, slots=True)
class ReassemblyConfig:
    """Everything the machine's behaviour depends on besides state, rows and time.

    - ``landing_policy``: "immediate" lands each complete transaction at once; "hold" keeps
      transactions that follow an open gap in state until the gap closes or ``hold_timeout_ms``
      passes, then lands them in tsnr order.
    - ``max_requests_per_gap``: a gap wider than this requests only its newest tsnrs (the ones
      still likely in the circular resend buffer); the older part is unrecoverable at once.
    - ``retry_*``/``max_retries``: after the first request round, up to ``max_retries`` more
      rounds, ``retry_initial_ms * retry_multiplier**n`` apart (capped at ``retry_max_ms``);
      then the gap is unrecoverable as soon as a processed message of the key was sent
      (URBHTIME) more than ``clock_skew_ms`` after the last request — the resend would have
      come before it — or at the latest ``verdict_wait_ms`` after the last round ran out.
    - ``partial_timeout_ms``: a partial transaction is lost once the replicator has sent a
      message on its destination (URBHTIME, seen through the key's own messages or the
      destination's ticks) this much later than the partial's last message: it sends a
      transaction's messages one after the other (R6), so a continuation
      cannot follow. None: never by evidence.
    - ``partial_stall_ms``: the last resort on processing time, for a destination that sends
      nothing (a stalled connector): after this long without a continuation the partial is
      reported lost and requested, but kept, so that a late continuation still completes it.
      None: never.
    - ``stat_interval_ms``: a key idle this long (processing time since its last data
      message) asks the replicator for its status (STAT); the SUBS reply on the key's own
      topic tells the last tsnr sent, so a lost last transaction becomes a gap. Asked again
      every interval until a SUBS answers; None: never.
    - ``storm_window_ms``/``storm_max_gaps``/``storm_max_tsnrs``: a key that opens more gaps,
      or asks for more tsnrs (retry rounds included), within the window than this is
      scrambled, not lossy: it stops requesting until an operator resumes it
      (``urbpipe gaps resume``).
    - ``confirmed_wait_ms``: a tsnr whose resend the replicator confirmed (TRSP response 0)
      is asked for again, and may be given up, only this long after the confirmation.
    - ``tod_offset_us``: microseconds to subtract from the replicator's STCK times to get UTC
      (leap seconds the TOD clock includes, and its offset when it runs on local time).
    - ``duplicate_window``: how many recently landed tsnrs are remembered.
    - ``max_buffered_bytes``: cap on payload bytes kept in state per key.
    - ``max_open_gaps``: cap on open gaps per key; the oldest beyond it becomes unrecoverable.
    - ``reply_destination``/``request_token``: carried into every TRAN request; when the token
      is set, TRSP replies with another token are recorded but do not touch gaps. What a TRSP
      error does to its tsnr follows ``pipeline.urb.codes.tran_reply_action``.
    - ``initial_states``: per subscription, the ISN-list initial-state definition asked to
      re-read the ISNs a resent transaction left unverified (none: no INST requests).
    - ``max_isns_per_request``: cap on the ISN list of one INST request; more ISNs of one
      file in one step are split over several requests.
    - ``initial_state_timeout_ms``: an INST request (or an INIT seen) with no CMPL/ERRO for
      this long is reported overdue (warning); a late reply still settles it.
    - ``initial_state_max_requests``: INST request messages a key keeps in flight (sent or
      started, not answered, not overdue); more wait in its queue (the replicator refuses
      requests beyond its IMAXREQ with 131/44).
    - ``initial_state_max_attempts``: requests that may ask for the same ISNs (an incomplete
      answer asks again for what did not come; a 131/44 refusal sends it again); then the
      request has failed (critical).
    - ``initial_state_retry_ms``: wait before sending a request refused with 131/44 again,
      doubling with each refusal.
    """

    landing_policy: str = "immediate"
    max_requests_per_gap: int = 100
    retry_initial_ms: int = 30_000
    retry_multiplier: float = 2.0
    retry_max_ms: int = 600_000
    max_retries: int = 5
    hold_timeout_ms: int = 300_000
    partial_timeout_ms: int | None = 60_000
    partial_stall_ms: int | None = 3_600_000
    duplicate_window: int = 1024
    max_buffered_bytes: int = 64 * 1024 * 1024
    max_open_gaps: int = 1000
    reply_destination: str = ""
    request_token: str = ""
    verdict_wait_ms: int = 300_000
    clock_skew_ms: int = 5_000
    initial_states: tuple[InitialStateTarget, ...] = ()
    max_isns_per_request: int = 500
    initial_state_timeout_ms: int = 600_000
    initial_state_max_requests: int = 2
    initial_state_max_attempts: int = 3
    initial_state_retry_ms: int = 60_000
    stat_interval_ms: int | None = None
    storm_window_ms: int = 60_000
    storm_max_gaps: int = 20
    storm_max_tsnrs: int = 2_000
    tod_offset_us: int = 0
    confirmed_wait_ms: int = 300_000

    def __post_init__(self) -> None:
        if self.landing_policy not in LANDING_POLICIES:
            raise ValueError(f"landing_policy must be one of {LANDING_POLICIES}")
        positive = ("max_requests_per_gap", "retry_initial_ms", "retry_max_ms",
                    "hold_timeout_ms", "duplicate_window", "max_buffered_bytes", "max_open_gaps",
                    "max_isns_per_request", "initial_state_timeout_ms", "storm_window_ms",
                    "initial_state_max_requests", "initial_state_max_attempts",
                    "initial_state_retry_ms", "confirmed_wait_ms",
                    "storm_max_gaps", "storm_max_tsnrs")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("max_retries", "verdict_wait_ms", "clock_skew_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.retry_multiplier < 1.0:
            raise ValueError("retry_multiplier must be >= 1")
        for name in ("partial_timeout_ms", "partial_stall_ms", "stat_interval_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 or None")
        if len(self.request_token) > 8:
            raise ValueError("request_token is at most 8 characters (URBIRTOK)")
        object.__setattr__(self, "initial_states", tuple(self.initial_states))

    def initial_state_for(self, subscription: str) -> InitialStateTarget | None:
        """The initial-state definition configured for a subscription's files, if any."""
        return next((t for t in self.initial_states if t.subscription == subscription), None)

    @classmethod
    def from_mapping(cls, d: Mapping[str, object]) -> ReassemblyConfig:
        """Build from a conf dict, ignoring unknown keys (the app conf holds more)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})  # type: ignore[arg-type]

    def stck_ms(self, stck: int) -> int | None:
        """A replicator STCK time as Unix milliseconds in UTC (None when not set)."""
        if not stck:
            return None
        return ((stck >> 12) - _TOD_UNIX_US - self.tod_offset_us) // 1000

    def backoff_ms(self, round_no: int) -> int:
        """Wait after request round ``round_no`` (1-based) before the next one."""
        wait = self.retry_initial_ms * self.retry_multiplier ** (round_no - 1)
        return int(min(wait, self.retry_max_ms))
