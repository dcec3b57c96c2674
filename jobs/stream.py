"""spark-submit entry point of the streaming job.

    spark-submit --jars "$(python -m pipeline.spark.engine.jars)" --py-files dist/pipeline.zip \\
        jobs/stream.py --conf-file conf/cluster.yaml

Reads the replicator output topics named in the conf, reassembles transactions per
(destination, subscription), requests prior transactions for gaps, and lands every table in
Delta exactly once (see README.md). Runs until stopped (SIGTERM/SIGINT stop it cleanly at a
batch boundary, letting a running batch finish for up to a minute; a kill -9 is also safe:
the next start resumes from the checkpoint).
Exit codes: 0 stopped cleanly, 1 the query failed, 2 invalid configuration (also a layout its
typed tables cannot take, or a source topic with more than one partition, found at start),
3 Kafka out of reach at start, 5 Kafka refused the job at start (authentication failed, TLS
handshake failed, or its principal lacks an ACL it needs: README, "Secured Kafka").
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from pipeline.config import ConfigError, Settings, load_settings
from pipeline.spark.engine.drain import stop_between_batches

#: how long SIGTERM/SIGINT let a running batch finish before stopping it anyway
STOP_WAIT_S = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jobs/stream.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--conf-file", default=None,
                        help="YAML configuration (default: $URBPIPE_CONF or conf/local.yaml)")
    parser.add_argument("--trigger", default=None,
                        help="override stream.trigger_interval, e.g. '10 seconds'")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one line per gateway call otherwise
    try:
        settings = load_settings(args.conf_file)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if settings.reconcile.every_minutes is not None:  # in-job rounds need a file to check
        from pipeline.errors import UsageError
        from pipeline.ops.reconcile_cmd import targets

        try:
            targets(settings, ())
        except UsageError as exc:
            print(f"error: reconcile.every_minutes: {exc}", file=sys.stderr)
            return 2
    from pipeline.errors import REFUSED, KafkaRefused
    from pipeline.ops.topic_check import KafkaOutOfReach, TopicCheckError, check_start

    try:  # ordering and permissions are checked before anything starts (topic_check.py)
        check_start(settings)
    except (TopicCheckError, ConfigError) as exc:  # ConfigError: e.g. an unreadable *_file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaOutOfReach as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KafkaRefused as exc:  # authentication, TLS or a missing ACL: never "unreachable"
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    from pipeline.spark.land.log_growth import advice

    slow_log = advice(settings, args.trigger)  # a conf that slows every commit in weeks
    if slow_log:
        logging.getLogger("urbpipe").warning(slow_log)
    from pipeline.ops.metrics import JobMetrics, job_metrics
    from pipeline.spark.engine.query import start_stream
    from pipeline.spark.engine.session import build_session
    from pipeline.spark.land.kafka_out import KafkaUnreachable

    try:  # spark-submit's own settings win over conf (pipeline/spark/engine/launcher.py)
        spark = build_session(settings)
    except ConfigError as exc:  # e.g. spark-submit without the jars
        print(f"error: {exc}", file=sys.stderr)
        return 2
    observed: list[JobMetrics] = []

    def observe(session: object, conf: Settings) -> JobMetrics:
        observed.append(job_metrics(session, conf))
        return observed[-1]

    try:
        query = start_stream(spark, settings, trigger_interval=args.trigger, observe=observe)
    except ConfigError as exc:  # e.g. a layout its typed tables cannot take (reconcile.py)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KafkaRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return REFUSED
    logging.getLogger("urbpipe").info("query %s started (id %s)", query.name, query.id)
    schedule = None
    if settings.reconcile.every_minutes is not None:  # in-job reconciliation rounds
        from pipeline.ops.reconcile_schedule import ReconcileSchedule

        schedule = ReconcileSchedule(settings, observed[-1].reconciled).start()

    # The handler only records the signal: it runs on the main thread while that thread is
    # inside a py4j call (awaitTermination), and a py4j call from the handler (query.stop())
    # re-enters the same socket, breaks the gateway and turned every SIGTERM into exit 1.
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        logging.getLogger("urbpipe").info("signal %d: stopping at a batch boundary", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not query.awaitTermination(1):
            if stopping.is_set():
                # a running batch is left to finish (up to STOP_WAIT_S, then interrupted and
                # replayed at the next start): stop() inside a batch broke its py4j calls and
                # filled the log with their stack traces on every SIGTERM
                stop_between_batches(query, timeout_s=STOP_WAIT_S)
                break
    except Exception as exc:  # StreamingQueryException: the job failed, say why in one line
        logging.getLogger("urbpipe").error("query failed: %s", str(exc).splitlines()[0])
        return 1
    finally:
        if schedule is not None:
            schedule.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
