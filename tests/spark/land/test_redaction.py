"""Spark's own redaction, with the session the product builds: the Kafka secrets the job hands
Spark's Kafka source (``Kafka.spark()``: the JAAS text with the SCRAM password, an inline client
key) are shown as ``*********(redacted)`` wherever Spark redacts (event log, UI environment
page, plans), because ``spark.redaction.regex`` (pipeline/spark/engine/session.py) names their keys.
"""

from __future__ import annotations

import uuid
from typing import Any

from pipeline.config import Kafka


def _redacted(spark: Any, pairs: dict[str, str]) -> dict[str, str]:
    """What Spark's ``Utils.redact`` (the event log's and UI's) makes of ``pairs``."""
    jvm = spark._jvm
    items = jvm.java.util.ArrayList()
    for key, value in pairs.items():
        items.add(jvm.scala.Tuple2(key, value))
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toSeq()
    out = jvm.org.apache.spark.util.Utils.redact(spark.sparkContext._jsc.sc().conf(), seq)
    back = jvm.scala.jdk.javaapi.CollectionConverters.asJava(out)
    return {t._1(): t._2() for t in back}


def test_the_kafka_source_options_are_redacted_by_the_session_regex(spark) -> None:
    password = f"s3cret-{uuid.uuid4().hex}"
    options = Kafka(bootstrap_servers="broker:9094", security_protocol="SASL_SSL",
                    sasl_mechanism="SCRAM-SHA-512", sasl_username="job",
                    sasl_password=password).spark()
    assert password in options["kafka.sasl.jaas.config"]  # what the Java client needs
    shown = _redacted(spark, {**options, "kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"})
    assert not any(password in value for value in shown.values()), shown
    assert shown["kafka.sasl.jaas.config"] == shown["kafka.ssl.keystore.key"] != options[
        "kafka.sasl.jaas.config"]
    assert shown["kafka.bootstrap.servers"] == "broker:9094"  # the rest stays readable
