"""Exit codes of ``urbpipe`` and the job, and the exceptions that map to them.

Scripts branch on the exit code, so each failure class has exactly one code and commands raise
these instead of printing and exiting themselves; ``cli.main`` turns them into one stderr line.
On the bottom floor (it imports nothing) because the streaming job raises one of them too: its
Kafka producer's refusal (``pipeline.spark.land.kafka_out``), which ``jobs/stream.py`` maps to
the same exit code as the commands.
"""

from __future__ import annotations

OK = 0
PROBLEMS = 1  # the command worked and found something an operator must look at
USAGE = 2  # bad arguments or an invalid conf file
UNREACHABLE = 3  # the broker or the lake could not be reached
# 4: an internal error (pipeline/ops/cli.py INTERNAL_ERROR)
REFUSED = 5  # Kafka refused us: authentication, TLS handshake or authorization
DRIFT = 6  # urbpipe reconcile: the lake did not equal Adabas for some ISN (repaired or not)


class OpsError(Exception):
    """A failure with a one-line message and the exit code it maps to."""

    exit_code = USAGE


class UsageError(OpsError):
    exit_code = USAGE


class BrokerUnreachable(OpsError):
    exit_code = UNREACHABLE


class LakeUnreachable(OpsError):
    exit_code = UNREACHABLE


class KafkaRefused(OpsError):
    """Kafka answered and said no: a wrong password, a certificate it or we do not trust, a
    missing ACL. Not "unreachable": the network is fine, the credentials or grants are not."""

    exit_code = REFUSED
