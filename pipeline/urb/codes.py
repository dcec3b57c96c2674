"""Status words and response-code subcodes, explained for operators.

The dump CLI and the alerting path print these next to the raw values, so an operator reading
an alert about a failed resend request sees "requested transaction not found in the resend
buffer" rather than "131/35".  Texts are paraphrased from the Event Replicator documentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

REPLICATOR_RSP = 131

#: URBSST status words.
STATUS: Mapping[str, str] = MappingProxyType(
    {
        "INIT": "Initial-state processing started",
        "CMPL": "Initial-state processing completed",
        "ERRO": "Initial-state processing ERROR",
        "SUBS": "Subscription status information",
        "STRT": "Replicator session started normally",
        "REST": "Replicator restarted after an abnormal end (sequence numbers restart at 1)",
        "TERM": "Replicator session terminated normally",
        "DEAC": "Replication deactivated",
        "REAC": "Replication reactivated",
        "TRSP": "Response to a prior-transaction request",
        "LOST": "Replication data possibly lost",
        "C5DA": "User data from a C5 command",
        "LODS": "ADALOD LOAD started",
        "LODE": "ADALOD LOAD ended",
        "RPLS": "Replay (ADARPL) started",
        "RPLE": "Replay (ADARPL) ended",
        "REFR": "Resource refreshed",
        "SAVS": "ADASAV RESTORE started",
        "SAVE": "ADASAV RESTORE ended",
        "RESS": "ADARES REGENERATE/BACKOUT started",
        "RESE": "ADARES REGENERATE/BACKOUT ended",
        "UPDS": "ADALOD UPDATE started",
        "UPDE": "ADALOD UPDATE ended",
        "AUTI": "Adabas utility function replicated (detail in URBSU)",
        "CLOS": "Destination closed",
        "OPEN": "Destination opened",
        "ASEC": "Adabas security definitions replicated",
        "SLON": "SLOG switched on for the destination",
        "SLOF": "SLOG switched off for the destination",
        "SLDO": "SLOG for database input switched on",
        "SLDF": "SLOG for database input switched off",
        "SLDS": "SLOG for database input suspended",
        "SLDR": "SLOG for database input resumed",
        "SLDD": "SLOG for database input disabled",
        "DFUL": "Destination full",
        "DERR": "Destination error",
        "DBCO": "Database connected",
        "DBDI": "Database disconnected",
        "DBNP": "Database not present",
        "DCMP": "Decompression error (after/before image or key)",
        "REFG": "Globals refreshed",
        "IQOP": "Input queue opened",
        "IQCL": "Input queue closed",
    }
)

#: URBSRT / URBIRT request types.
REQUEST: Mapping[str, str] = MappingProxyType(
    {
        "STAT": "status request",
        "INST": "initial-state request",
        "TRAN": "prior-transaction request",
        "OPND": "open-destination request",
        "CLSD": "close-destination request",
    }
)

#: Response 131 (replicator) subcodes.
SUBCODES_131: Mapping[int, str] = MappingProxyType(
    {
        1: "URBD and data exceed the output buffer",
        2: "Subscription user exit returned an error (see URBRERRC)",
        3: "Space shortage in the nucleus (LREPL)",
        4: "Space shortage in the replicator (LREPL)",
        5: "Subscription user exit set an invalid data length (URBDLEND)",
        6: "Response destination not found for the status request",
        7: "Status request names neither a destination nor a subscription",
        8: "Subscription or destination of the status request not found",
        9: "Initial-state name not found",
        10: "All requests in one message must name the same response destination",
        11: "All requests in one message must name the same initial-state definition",
        12: "INITIALSTATE DBID/FNR definition not found as requested in URBI",
        13: "Selection criteria type not supported or invalid",
        14: "DBID/FNR must be given in both the initial-state request and its definition",
        15: "URBILEND > 0 for an initial-state request that selects all records",
        16: "Invalid ISN list or ISN range (duplicate ISN, ISN inside a range, overlapping or "
        "reversed ranges)",
        17: "Initial-state processing stopped by the operator",
        18: "All URBIs of a message must carry the same request token",
        19: "URBILEND = 0 for an initial-state request with selection",
        20: "Invalid key value while decompressing for the subscription",
        21: "URBIARC/ACOD/WCOD set but the replicator is not UES-enabled",
        22: "Initial-state request for a deactivated DBID/FNR",
        23: "Invalid UES parameters: URBIARC/ACOD/WCOD must not all be blank",
        24: "Invalid UES parameters: URBIARC/ACOD/WCOD should be zero",
        25: "Reserved fields URBIRES1/URBIRES2 are not zero",
        26: "Destination name not found",
        27: "No active destination for the status request",
        28: "Initial-state request received after replicator shutdown began",
        30: "Unknown response destination name in URBI",
        31: "Unknown destination name in URBI",
        32: "Unknown subscription name in URBI",
        33: "URBIDNAM destination is not related to the subscription",
        34: "The subscription has no resend buffer defined",
        35: "Requested transaction not found in the resend buffer",
        36: "The subscription is not active",
        37: "Invalid transaction in the resend buffer",
        38: "No active destinations",
        39: "Selection data not permitted in a TRAN request",
        40: "DBID and file number not permitted in a TRAN request",
        41: "Initial-state name not permitted in a TRAN request",
        42: "UES parameters must be zero in a TRAN request",
        43: "Reserved URBIRES1/URBIRES2 must be zero in a TRAN request",
        44: "Too many concurrent initial-state requests (IMAXREQ)",
        45: "Input request: URBH eye-catcher invalid",
        46: "Input request: URBHLEN invalid",
        47: "Input request: URBHBORD invalid",
        48: "Input request: URBHVERS invalid",
        49: "Input request: message truncated",
        50: "Input request: URBHLENT invalid",
        51: "Input request: URBILENH invalid",
        52: "Input request: URBILEND invalid",
        53: "Input request: URBILEN invalid",
        54: "Input request: reserved area not zero",
        55: "Input request: more than one status request received",
        56: "Input request: invalid URBI request type",
        57: "Input request: different request types mixed in one message",
        58: "Invalid destination for the response",
        87: "Unexpected message sequence number",
        88: "Unrecognized eye-catcher in a control block after the URBH",
        99: "URBISNAM may not be given for this request type",
        100: "URBITSNR may not be given for this request type",
        101: "Open/close destination request failed on some tasks",
        102: "Open/close destination request failed",
        103: "Open/close destination request invalid or already in progress",
        108: "Input request: URBI eye-catcher invalid",
    }
)

#: Adabas response codes seen in URBR/URBS.
RESPONSES: Mapping[int, str] = MappingProxyType(
    {
        0: "OK",
        113: "ISN not found (record does not exist)",
        131: "Replicator response",
        148: "Database (nucleus) not active",
    }
)


#: What a TRAN reply (URBS TRAN/TRSP, response 131) means for the tsnr it names. Seed 000
#: routes subcodes 34, 35, 37 and 39-43 to the request's destination as well: they are
#: about the request or the transaction, not a passing state of the replicator.
#: - settle: this transaction cannot be resent (34: the subscription has no resend buffer;
#:   35: not, or no longer, in the circular resend buffer — newer ones may still be there;
#:   37: what the buffer holds for it is unusable);
#: - park: 36, the subscription is not active: it may be resent after a reactivation;
#: - fatal: the request itself is wrong (unknown or unrelated subscription/destination,
#:   fields a TRAN must not carry, no active destination): asking again cannot help;
#: - retry: anything else (e.g. a space shortage) may pass.
TRAN_SETTLE: frozenset[int] = frozenset({34, 35, 37})
TRAN_PARK: frozenset[int] = frozenset({36})
TRAN_FATAL: frozenset[int] = frozenset({31, 32, 33, 38, 39, 40, 41, 42, 43})
TranAction = Literal["ok", "settle", "fatal", "park", "retry"]


def tran_reply_action(rsp: int, subc: int) -> TranAction:
    """What the job does with the tsnr a TRSP names (see ``TRAN_SETTLE`` and friends)."""
    if rsp == 0:
        return "ok"
    if rsp != REPLICATOR_RSP:
        return "retry"
    if subc in TRAN_SETTLE:
        return "settle"
    if subc in TRAN_PARK:
        return "park"
    return "fatal" if subc in TRAN_FATAL else "retry"


def describe_status(rt: str, st: str) -> str:
    """Explain a URBS status word; ``rt`` (the request type) names the request it answers."""
    text = STATUS.get(st.strip(), f"unknown status {st!r}")
    req = REQUEST.get(rt.strip()) if rt else None
    return (
        f"{text} (reply to {req})"
        if req and st.strip() not in ("INIT", "CMPL", "ERRO", "SUBS", "TRSP")
        else text
    )


def describe_subcode(rsp: int, subc: int) -> str:
    """Explain a response code and subcode (response 131 subcodes in words)."""
    if rsp == 0 and subc == 0:
        return ""
    if rsp == REPLICATOR_RSP:
        return SUBCODES_131.get(subc, f"replicator response 131, unknown subcode {subc}")
    base = RESPONSES.get(rsp, f"Adabas response {rsp}")
    return f"{base}, subcode {subc}" if subc else base
