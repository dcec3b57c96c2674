"""The platform end to end with real components: KRaft broker → Spark Kafka source → Delta."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chispa import assert_df_equality
from confluent_kafka import Producer

from devtools import broker
from pipeline.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_kafka_to_delta_stream_round_trip(spark, test_settings: Settings, fresh_topic: str,
                                         tmp_path: Path) -> None:
    producer = Producer(test_settings.kafka.confluent())
    sent = [(f"K{i % 3}".encode(), bytes([i]) * (i + 1)) for i in range(40)]
    for key, value in sent:
        producer.produce(fresh_topic, key=key, value=value)
    assert producer.flush(30) == 0

    source = (spark.readStream.format("kafka").options(**test_settings.kafka.spark())
              .option("subscribe", fresh_topic).option("startingOffsets", "earliest").load())
    query = (source.select("key", "value").writeStream.format("delta")
             .option("checkpointLocation", str(tmp_path / "ck"))
             .start(str(tmp_path / "table")))
    query.processAllAvailable()
    query.stop()

    landed = spark.read.format("delta").load(str(tmp_path / "table"))
    expected = spark.createDataFrame(sent, "key binary, value binary")
    assert_df_equality(landed, expected, ignore_row_order=True)


def test_broker_start_is_idempotent_and_names_taken_port(kafka_bootstrap: str,
                                                        test_settings: Settings,
                                                        tmp_path: Path) -> None:
    assert broker.start(test_settings).startswith("broker already running")
    # A second broker home on the port the first one holds: one line naming the port.
    conf = tmp_path / "c.yaml"
    conf.write_text((ROOT / "conf" / "test.yaml").read_text().replace(
        "data_dir: .run/test-kafka", f"data_dir: {tmp_path / 'k'}"))
    done = subprocess.run([sys.executable, "-m", "devtools.broker", "start",
                           "--conf-file", str(conf)], capture_output=True, text=True,
                          check=False, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "port 19092 on 127.0.0.1 is taken" in done.stderr
