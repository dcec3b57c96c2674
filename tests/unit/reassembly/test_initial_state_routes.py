"""INST reply routes, worked out once from the job's initial-state targets."""

from __future__ import annotations

from pipeline.reassembly.config import (
    InitialStateTarget,
    initial_state_routes,
    inst_reply_routes,
)


def test_one_pass_gives_both_routes_and_leaves_shared_names_out() -> None:
    targets = [InitialStateTarget("COLOR", "ICOLOR", ((10006, 4),), ("OUT1", "OUT2")),
               InitialStateTarget("EMPL", "ISHARED", ((10006, 11),), ("OUT1",)),
               InitialStateTarget("OTHER", "ISHARED", ((10006, 12),), ("OUT1",))]
    routes = initial_state_routes(targets, "URBPIPE")
    assert routes.by_name == {"ICOLOR": "COLOR"}
    assert routes.replies == {("ICOLOR", "URBPIPE1"): ("OUT1", "COLOR"),
                              ("ICOLOR", "URBPIPE2"): ("OUT2", "COLOR")}
    assert inst_reply_routes(targets, "URBPIPE") == routes.replies
