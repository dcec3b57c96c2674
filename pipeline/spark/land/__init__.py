"""Landing the job's own tables: their definitions, the batch writer and its raw steps, the
direct writer, commits and the ledger. Imports neither ``engine`` nor ``typed``."""
