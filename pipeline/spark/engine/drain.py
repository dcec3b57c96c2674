"""Waiting for a running query to catch up with Kafka (demo, tests, benchmarks).

``processAllAvailable()`` never returns for this job: with processing-time state timeouts Spark
runs a batch on every trigger, so the "no new data" condition it waits for is never reached.
Instead, wait until every source's processed end offset equals the latest offset Kafka reported
and a few consecutive batches read no input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any


def _caught_up(progress: dict[str, Any]) -> bool:
    for source in progress.get("sources", []):
        end, latest = source.get("endOffset"), source.get("latestOffset")
        if end is None or latest is None:
            return False
        if _offsets(end) != _offsets(latest):
            return False
    return True


def await_idle(query: Any, *, timeout_s: float = 300.0, quiet_batches: int = 2,
               until: Callable[[], bool] | None = None, poll_s: float = 0.5) -> None:
    """Block until the query is caught up and idle (and ``until()`` holds, if given).

    Raises TimeoutError with the last progress when it does not happen in time, and the
    query's own exception if it failed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        recent = list(query.recentProgress)[-quiet_batches:]
        idle = (len(recent) == quiet_batches
                and all(p.get("numInputRows", 1) == 0 for p in map(_as_dict, recent))
                and _caught_up(_as_dict(recent[-1])))
        if idle and (until is None or until()):
            # ``until`` may have seen Delta commits of a batch still in flight (its Kafka sends
            # come after its commits): wait until that batch, too, has completed.
            _await_batch(query, _as_dict(recent[-1]).get("batchId", -1) + 1, deadline)
            return
        if time.monotonic() > deadline:
            last = _as_dict(recent[-1]) if recent else {}
            raise TimeoutError(f"query not idle after {timeout_s:.0f}s; last batch "
                               f"{last.get('batchId')} read {last.get('numInputRows')} rows")
        time.sleep(poll_s)


def _await_batch(query: Any, batch_id: int, deadline: float, poll_s: float = 0.3) -> None:
    """Block until the progress of ``batch_id`` (or a later batch) has been reported."""
    while True:
        done = [_as_dict(p).get("batchId", -1) for p in query.recentProgress]
        if done and max(done) >= batch_id:
            return
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} did not complete in time")
        time.sleep(poll_s)


def _offsets(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _as_dict(progress: Any) -> dict[str, Any]:
    if isinstance(progress, dict):
        return progress
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def stop_between_batches(query: Any, timeout_s: float = 60.0, poll_s: float = 0.05) -> None:
    """Stop the query while no trigger is running, if one comes within ``timeout_s``.

    With processing-time timers the query runs a batch on every trigger; ``stop()`` in the
    middle of one interrupts Spark's stream thread mid-write (harmless for exactly-once, the
    batch is replayed, but it logs an interrupted stack trace). Waiting for the gap between two
    triggers avoids that noise in demos and tests.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and query.isActive:
        if not query.status.get("isTriggerActive", False):
            break
        time.sleep(poll_s)
    query.stop()
