"""The streaming engine: the Spark session and its jars, the query (Kafka source, decode stage,
stateful stage, state lanes) and what waits on it. Imports ``land`` and ``typed``; neither
imports it."""
