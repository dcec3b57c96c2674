"""The job's query run in the test process, on the shared Spark session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pipeline.config import Settings


@contextmanager
def running_job(spark: Any, settings: Settings, *, trigger_interval: str = "1 second",
                observe: Callable[..., Any] | None = None,
                feed: Callable[[], None] | None = None) -> Iterator[Any]:
    """``start_stream`` with the job's metrics listener; on exit the query stops between two
    batches and the listener leaves the session.

    ``feed`` (start the simulator, send a stream) runs before the query starts, so its
    messages are on the topic for the first batch: a first batch without them costs a whole
    batch more (the stateful operator's worker starts for it, ~5-10 s on the 2-core machine)
    and the messages then wait for the next one.

    The session outlives the test: a listener left behind would hear (and parse) every later
    test's progress events on Spark's listener bus, which then runs behind the batches. An
    ``observe`` of the caller's is the caller's to detach (the on-call test keeps its
    endpoint up after the run)."""
    from pipeline.ops.metrics import job_metrics
    from pipeline.spark.engine.drain import stop_between_batches
    from pipeline.spark.engine.query import start_stream

    listeners: list[Any] = []

    def ours(session: Any, conf: Settings) -> Any:
        metrics = job_metrics(session, conf)
        listeners.append(metrics.listener)
        return metrics

    if feed is not None:
        feed()
    query = None
    try:  # a start that fails after the metrics attached its listener detaches it too
        query = start_stream(spark, settings, trigger_interval=trigger_interval,
                             observe=observe or ours)
        yield query
    finally:
        if query is not None:
            stop_between_batches(query)
        for listener in listeners:
            listener.close()
            spark.streams.removeListener(listener)
