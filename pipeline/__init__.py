"""Event Replicator for Adabas -> Kafka -> Spark -> Delta pipeline."""
