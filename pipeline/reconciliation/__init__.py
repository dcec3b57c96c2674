"""Reconciliation: the lake's typed tables compared with Adabas through the replicator's own
initial-state requests (INST by ISN list). ``verdicts`` judges one ISN race-free, ``rounds``
plans a round and says what it proves; ``pipeline.ops.reconcile_cmd`` does the I/O."""
