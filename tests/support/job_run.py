"""The job's query run in the test process, on the shared Spark session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pipeline.config import Settings


@contextmanager
def running_job(spark: Any, settings: Settings, *, trigger_interval: str = "1 second",
                observe: Callable[..., Any] | None = None) -> Iterator[Any]:
    """``start_stream`` with the job's metrics listener; on exit the query stops between two
    batches and the listener leaves the session. The session outlives the test: a listener
    left behind would hear (and parse) every later test's progress events on Spark's
    listener bus, which then runs behind the batches. An ``observe`` of the caller's is the
    caller's to detach (the on-call test keeps its endpoint up after the run)."""
    from pipeline.ops.metrics import job_metrics
    from pipeline.spark.engine.drain import stop_between_batches
    from pipeline.spark.engine.query import start_stream

    listeners: list[Any] = []

    def ours(session: Any, conf: Settings) -> Any:
        metrics = job_metrics(session, conf)
        listeners.append(metrics.listener)
        return metrics

    query = start_stream(spark, settings, trigger_interval=trigger_interval,
                         observe=observe or ours)
    try:
        yield query
    finally:
        stop_between_batches(query)
        for listener in listeners:
            listener.close()
            spark.streams.removeListener(listener)
