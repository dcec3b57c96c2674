"""Event Replicator for Adabas simulator: URB message streams and answers to requests.

`Replicator(config, seed)` is the library entry point (see replicator.py); the command line is
`python -m devtools.sim --help`. Every byte is built with the product's codec, pipeline.urb.
"""

from devtools.sim.config import default_config, load_config
from devtools.sim.faults import FaultPlan
from devtools.sim.load import LoadOptions, drive
from devtools.sim.model import SimConfig
from devtools.sim.outbox import Delivery
from devtools.sim.replicator import Replicator
from devtools.sim.sinks import FileSink, KafkaSink, MemorySink, read_messages

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
