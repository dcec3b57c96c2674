"""Event Replicator for Adabas simulator: URB message streams and answers to requests.

`Replicator(config, seed)` is the library entry point (see replicator.py); the command line is
`python -m pipeline.sim --help`. Every byte is built with the product's codec, pipeline.urb.
"""

from pipeline.sim.config import default_config, load_config
from pipeline.sim.faults import FaultPlan
from pipeline.sim.load import LoadOptions, drive
from pipeline.sim.model import SimConfig
from pipeline.sim.outbox import Delivery
from pipeline.sim.replicator import Replicator
from pipeline.sim.sinks import FileSink, KafkaSink, MemorySink, read_messages

__all__ = [
    "Delivery",
    "FaultPlan",
    "FileSink",
    "KafkaSink",
    "LoadOptions",
    "MemorySink",
    "Replicator",
    "SimConfig",
    "default_config",
    "drive",
    "load_config",
    "read_messages",
]
