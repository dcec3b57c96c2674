"""The Spark floor, in three rooms whose imports run one way (pipeline/ARCHITECTURE.md):
``engine`` (session, query, stages) → ``typed`` (landing the typed tables) → ``land``
(landing the job's own tables, the batch writer)."""
