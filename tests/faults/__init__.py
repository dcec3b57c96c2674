"""Fault-injection tests (``make faults``): the job under crashes, outages and bad input."""
