"""The development rig: what runs the product without a mainframe, never shipped with it.

The replicator simulator (``devtools.sim``), the project's own Kafka broker in KRaft mode,
secured or not (``devtools.broker``, ``devtools.broker_security``), the local Spark standalone
cluster (``devtools.cluster``) and the demo (``devtools.demo``). They import the product
(``pipeline``); the product imports none of them (tests/unit/test_architecture.py), and the
``pipeline.zip`` a cluster job ships carries the product only.
"""
