# urbpipe: Event Replicator for Adabas -> Kafka -> Spark Structured Streaming -> Delta Lake.
# `make demo` and `make test` do all set-up themselves (venv, jars, broker) on a fresh machine.
SHELL := /bin/bash
PY := .venv/bin/python
CONF ?= conf/local.yaml

.PHONY: help setup jars demo cluster-demo test test-unit faults lint bench scaling soak lake-soak log-age broker-start broker-stop catalog-stop clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

setup:  ## venv + pinned packages + Maven jars + the compiled scan (rustc; idempotent)
	@scripts/setup.sh

jars:  ## resolve the JVM jars (Spark connector + Delta, Kafka broker) with Maven
	@scripts/setup.sh

demo: setup  ## run the pipeline on the embedded default (local broker, simulator, job)
	@$(PY) -m devtools.broker start --conf-file $(CONF)
	@$(PY) -m devtools.demo --conf-file $(CONF)

cluster-demo: setup  ## the demo on a local Spark standalone cluster, submitted by README's recipe
	@$(PY) -m devtools.broker start --conf-file $(CONF)
	@$(PY) -m devtools.cluster demo --conf-file $(CONF)

test:  ## the whole suite: lint, unit, Spark and end-to-end tests (starts/stops the broker)
	@scripts/setup.sh --tools
	@.venv/bin/ruff check .
	@# engine-free tests in two processes, then Spark and end-to-end in two (one Spark session
	@# each, one test module per unit of work, the test broker started here and shared); both
	@# tiers always run, one after the other (decision 0016)
	@# the broker is ours to stop if it was not running before either tier (xdist workers of
	@# both tiers leave it running for their peer)
	@rc=0; T="--conf-file conf/test.yaml"; \
	$(PY) -m devtools.broker status $$T | grep -q "^broker running" && own=0 || own=1; \
	$(PY) -m pytest -q -m "not spark and not e2e" -n 2 --durations=10 || rc=1; \
	$(PY) -m devtools.broker start $$T >/dev/null || rc=1; \
	$(PY) -m pytest -q -m "spark or e2e" -n 2 --dist loadfile --durations=40 || rc=1; \
	[ $$own = 0 ] || $(PY) -m devtools.broker stop $$T >/dev/null || rc=1; \
	exit $$rc

test-unit: setup  ## engine-free tests only (no Spark, no broker)
	@$(PY) -m pytest -q -m "not spark and not e2e"

faults:  ## fault-injection tests: kill -9, broker outage, corruption, restarts, unanswered gaps
	@scripts/setup.sh
	@.venv/bin/python -m pytest -q -m faults

lint: setup  ## ruff
	@.venv/bin/ruff check .

bench: setup  ## codec, state task, decode stage's routing, job start, pipeline vs raw Kafka->Delta at 2,000 and 20,000 msgs/batch (1-8 and 1 records per transaction), one busy key, then the typed tables over 1/2/10/50 files and a current table's MERGE against its size (~78 min; figures go to BENCHMARKS.md by hand)
	@$(PY) benchmarks/bench_codec.py
	@$(PY) benchmarks/bench_state.py
	@$(PY) benchmarks/bench_routing.py
	@$(PY) benchmarks/bench_start.py
	@echo "== pipeline vs raw, 2,000 messages per batch (the template's cap) =="
	@$(PY) benchmarks/bench_pipeline.py $(BENCH_ARGS)
	@echo "== pipeline vs raw, 20,000 messages per batch (the product's default cap) =="
	@$(PY) benchmarks/bench_pipeline.py --transactions 1200000 --max-offsets 20000 $(BENCH_ARGS)
	@echo "== pipeline vs raw, 20,000 messages per batch, transactions of one record (the second shape) =="
	@$(PY) benchmarks/bench_pipeline.py --transactions 1200000 --max-offsets 20000 --max-records 1 $(BENCH_ARGS)
	@echo "== one busy key (every transaction on one state task), 5,000 messages per batch: 4 full batches, so a steady figure =="
	@$(PY) benchmarks/bench_pipeline.py --transactions 400000 --max-offsets 5000 --subscriptions 1 $(BENCH_ARGS)
	@echo "== typed tables (each file a layout, history on) over 1/2/10/50 files at 2,000 and 20,000 msgs/batch, against the raw passthrough of the same load =="
	@$(PY) benchmarks/bench_typed.py $(TYPED_ARGS)
	@echo "== a batch's MERGE into a typed current table of 100k, 1M and 3M rows (delta-rs copy-on-write) =="
	@$(PY) benchmarks/current_merge_size.py

scaling: setup  ## full pipeline at 2k/5k/20k/50k msgs/batch x 1/2/8 busy keys, then typed tables over 1/10/50 files: tx/s, batch time, memory (~75 min; SCALING_ARGS=..., TYPED_ARGS=...)
	@$(PY) benchmarks/scaling.py $(SCALING_ARGS)
	@$(PY) benchmarks/bench_typed.py --files 1,10,50 $(TYPED_ARGS)

soak: setup  ## >=10 min steady load with faults: state and memory flat? (not in CI; SOAK_ARGS=...)
	@$(PY) benchmarks/soak.py $(SOAK_ARGS)

log-age: setup  ## a commit's cost as a table ages (fresh, 1, 7, 30 days of _delta_log), both log stores, local disk and the S3 emulator, with the job commit's parts (~55 min; LOG_AGE_ARGS=...)
	@$(PY) benchmarks/delta_log_age.py $(LOG_AGE_ARGS)

lake-soak: setup  ## >=2,000 batches, maintenance off then on: files, log size, query times (not in CI; LAKE_SOAK_ARGS=...)
	@$(PY) benchmarks/lake_soak.py $(LAKE_SOAK_ARGS)

broker-start: setup  ## start the local KRaft broker and create the topics from conf
	@$(PY) -m devtools.broker start --conf-file $(CONF)

broker-stop:  ## stop the local broker by its PID
	@$(PY) -m devtools.broker stop --conf-file $(CONF)

catalog-stop:  ## stop the embedded catalog's metastore server (Derby, catalog.local) by its PID
	@$(PY) -m pipeline.spark.engine.metastore stop --conf-file $(CONF)

clean:  ## remove generated data (lake, catalog, checkpoints, broker data); keeps venv and jars
	@$(PY) -m devtools.broker stop --conf-file $(CONF) || true
	@$(PY) -m pipeline.spark.engine.metastore stop --conf-file $(CONF) || true
	rm -rf .lake .lake-catalog .run .kafka .bench
