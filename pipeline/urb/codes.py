"""Status words and response-code subcodes, explained for operators.

The dump CLI and the alerting path print these next to the raw values, so an operator reading
an alert about a failed resend request sees "requested transaction not found in the resend
buffer" rather than "131/35".

Sources of the response-131 (Event Replicator) subcode texts, each written here in our own
words:

- Software AG's adapya-era (Apache-2.0), ``adapya/era/urb.py``, tuple
  ``texts_reptor_subcodes``: the complete table 1-112, kept by a Software AG developer next
  to the URB DSECT maps. Read in the PyPI release 1.3.0 installed in ``.venv`` and in the
  GitHub repository SoftwareAG/adapya-era, where the table is the same in every version of
  the file (1.0.1 at commit 83208f5, 1.0.2 at 461851f, 1.3.0 at a5d1d57; the repository's
  newest commit, f877e85 of 2023-12-27, leaves it unchanged). It marks 29 as unused.
- Seed 000 (the replicator's request/reply reference): 12 in its INST/ERRO example, 16 for
  an ISN list that breaks its rules, 34, 35, 37 and 39-43 as the prior-transaction errors
  also sent to the request's destination, and that the resend buffer is circular (newer
  transactions overwrite older ones).
- Software AG, "Adabas Response Codes", Response 131 (e.g.
  https://documentation.softwareag.com/adabas/ada852mfr/dbacard/nucresp.htm, Adabas
  8.5.2) and "Event Replicator for Adabas Messages and Codes" (4.1.1,
  https://documentation.softwareag.com/adabas/ark411/arf/pdf/messages.pdf) are the
  vendor's own references, but the stored copies searchable from here hold only the pages'
  beginnings (their tables of contents), so no text below is taken from them and no
  difference to adapya-era could be checked. Should a manual word a subcode differently,
  the manual wins.

Unknown: subcode 29 (unused in every source) and any subcode above 112 (newer replicator
versions may define more); :func:`describe_subcode` says "unknown subcode N" for them rather
than guess.
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

#: Response 131 (replicator) subcodes, in our words (sources in the module docstring).
SUBCODES_131: Mapping[int, str] = MappingProxyType(
    {
        1: "The URBD and its data do not fit into the output buffer",
        2: "The subscription user exit reported an error (its code is in URBRERRC)",
        3: "The Adabas nucleus ran short of replication space (LREPL)",
        4: "The replicator ran short of replication space (LREPL)",
        5: "The subscription user exit returned an invalid data length (URBDLEND)",
        6: "The reply destination of the status request does not exist",
        7: "The status request names neither a subscription nor a destination",
        8: "The subscription or destination named in the status request does not exist",
        9: "No initial-state definition has the requested name",
        10: "The URBIs of one message name different reply destinations (URBIRNAM)",
        11: "The URBIs of one message name different initial-state definitions (URBIINAM)",
        12: "The initial-state definition has no file with the DBID/FNR a URBI asks for",
        13: "The selection criteria type is invalid or not supported",
        14: "DBID and FNR must be given both in the initial-state request and in its "
        "definition",
        15: "URBILEND is not zero although the initial-state definition selects whole files",
        16: "The ISN list or an ISN range is invalid (an ISN given twice, an ISN inside a "
        "range, overlapping or reversed ranges)",
        17: "An operator stopped the initial-state processing",
        18: "The URBIs of one message carry different request tokens (URBIRTOK)",
        19: "URBILEND is zero although the initial-state definition needs selection data "
        "(an ISN list)",
        20: "A key value could not be decompressed for the subscription",
        21: "URBIARC/URBIACOD/URBIWCOD are set but the replicator runs without universal "
        "encoding support (UES)",
        22: "The initial-state request names a DBID/FNR whose replication is deactivated",
        23: "Invalid UES parameters: URBIARC/URBIACOD/URBIWCOD may not all be blank",
        24: "Invalid UES parameters: URBIARC/URBIACOD/URBIWCOD must be zero here",
        25: "The reserved fields URBIRES1/URBIRES2 are not zero",
        26: "No destination has this name",
        27: "The status request finds no active destination",
        28: "The initial-state request arrived after the replicator began to shut down",
        30: "The reply destination named in the URBI (URBIRNAM) does not exist",
        31: "The destination named in the URBI (URBIDNAM) does not exist",
        32: "The subscription named in the URBI (URBISNAM) does not exist",
        33: "The destination named in URBIDNAM does not belong to the subscription",
        34: "The subscription has no resend buffer defined: it cannot resend transactions",
        35: "Requested transaction not found in the resend buffer (not kept, or already "
        "overwritten: the buffer is circular)",
        36: "The subscription is not active",
        37: "The resend buffer's copy of the requested transaction is invalid (unusable)",
        38: "There is no active destination",
        39: "A prior-transaction (TRAN) request may not carry selection data",
        40: "A TRAN request may not give a DBID or file number",
        41: "A TRAN request may not name an initial-state definition",
        42: "A TRAN request must have zero UES parameters (URBIARC/URBIACOD/URBIWCOD)",
        43: "A TRAN request must have zeros in its unused fields URBIRES1/URBIRES2",
        44: "Too many initial-state requests are active at once (limit IMAXREQ)",
        45: "Input request: the URBH eye-catcher is wrong",
        46: "Input request: URBHLEN is wrong",
        47: "Input request: URBHBORD (byte order) is wrong",
        48: "Input request: URBHVERS (DSECT version) is wrong",
        49: "Input request: the message is shorter than it says (truncated)",
        50: "Input request: URBHLENT (total length) is wrong",
        51: "Input request: URBILENH is wrong",
        52: "Input request: URBILEND is wrong",
        53: "Input request: URBILEN is wrong",
        54: "Input request: a reserved area is not zero",
        55: "Input request: the message holds more than one status request",
        56: "Input request: a URBI has an invalid request type",
        57: "Input request: one message mixes different request types",
        58: "The destination for the reply is invalid",
        59: "Replay requested for a database that is not active",
        60: "The replay token is undefined or outdated",
        61: "The replicator got an invalid request (e.g. a record buffer too short, or no "
        "format buffer in the initialization handshake)",
        62: "Record data left out: the file's FDT as of the update is no longer available",
        63: "The file named in the C5 command (option R) is not replicated",
        64: "Extended subscription: comparing these field types is not supported",
        65: "Extended subscription: a field of a condition is missing from the format buffer",
        66: "Extended subscription: a field of a condition cannot be used for selection",
        67: "Extended subscription: the FLIST data supplied by the user is invalid or out of "
        "range",
        68: "Extended subscription: unexpected error",
        69: "A replay of the same DBID/FNR is already running",
        70: "The file is not in any of the replicator's subscriptions",
        71: "A date/time has a wrong format or value",
        72: "The replay parameters are wrong",
        73: "A subscription of the replay was deactivated",
        74: "A destination of the replay was deactivated",
        75: "A replay destination without SLOG was closed",
        76: "The replay utility ADARPL ended abnormally",
        77: "The replay cannot change to the requested status",
        78: "New transactions were not held back during the replay",
        79: "A user cancelled the replay",
        80: "Timed out waiting for Adabas to reactivate the file",
        81: "A token of an existing replay request (RRU) was found that replay did not "
        "generate",
        82: "RRDSORT is neither Y nor N: the database is not connected to the replicator now",
        83: "The replay request names neither subscriptions nor destinations",
        84: "Replication data from Adabas can reach an active subscription/destination pair "
        "that takes part in a replay-only replay",
        85: "A file of the replay was deactivated",
        86: "Invalid format buffer for a destination of type ADABAS (update commands)",
        87: "A message sequence number is not the one expected",
        88: "A control block after the URBH has an eye-catcher the replicator does not know",
        89: "The replay initialization names the same subscription more than once",
        90: "The replay initialization names the same destination more than once",
        91: "An automatic replay needs a start date/time",
        92: "The timeout parameter is too high",
        93: "The replicator system file holds no PLOG information",
        94: "A format buffer for after/before images is also used for the key",
        95: "Setting the user or replicator encoding failed",
        96: "The target nucleus of the initial-state request is down (response 148)",
        97: "The format buffer contains a LOB field, which is not supported",
        98: "The Adabas nucleus has a higher version than the replicator",
        99: "URBISNAM (subscription name) must not be given for this request type",
        100: "URBITSNR (transaction number) must not be given for this request type",
        101: "The open/close destination request failed on some of the tasks",
        102: "The open/close destination request failed",
        103: "The open/close destination request is invalid or came while one is in progress",
        104: "Field filter: the begin byte lies beyond the field's length",
        105: "Field filter: begin byte plus portion length exceed the field's length",
        106: "Field filter: a begin byte or length is not supported for a U, P, F, G or W "
        "field",
        107: "The length given for the field is invalid",
        108: "Input request: the URBI eye-catcher is wrong",
        109: "An Adabas security (ADASCR) function was replicated to a subscription file "
        "defined with SFSECURITYFILE=NO",
        110: "The replicator got an invalid Adabas security (ADASCR) pseudo-transaction",
        111: "A record change (delete, insert, refresh or update) was replicated to a "
        "subscription file defined with SFSECURITYFILE=YES",
        112: "An update could not be converted to a delete: no before image was supplied",
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


#: What a TRAN reply (URBS TRAN/TRSP, response 131) means for the tsnr it names; the
#: reasons are in :func:`tran_reply_action`'s docstring.
TRAN_SETTLE: frozenset[int] = frozenset({34, 35, 37})
TRAN_PARK: frozenset[int] = frozenset({36})
#: The request itself is wrong: a TRAN error about the request (31-33, 38, 39-43), or a
#: malformed input message or URBI (10, 18, 25, 26, 30, 45-48, 50-58, 88, 99, 100, 108).
TRAN_FATAL: frozenset[int] = frozenset(
    {10, 18, 25, 26, 30, 31, 32, 33, 38, 39, 40, 41, 42, 43, 45, 46, 47, 48}
    | set(range(50, 59))
    | {88, 99, 100, 108}
)
TranAction = Literal["ok", "settle", "fatal", "park", "retry"]


def tran_reply_action(rsp: int, subc: int) -> TranAction:
    """What the job does with the tsnr a TRSP (reply to a prior-transaction request) names.

    - ``ok``: response 0, the transaction is being resent.
    - ``settle`` (34, 35, 37): this transaction cannot be resent, asking again gives the
      same answer. 34: the subscription has no resend buffer; 35: the transaction is not,
      or no longer, in the resend buffer — it is circular (seed 000: "Newer transactions
      will overwrite older ones"), so it never comes back, while newer tsnrs of the same
      gap may still be there; 37: the buffer's copy of it is invalid. Seed 000 sends these
      to the request's destination too: they are about the transaction, not the request.
    - ``park`` (36): the subscription is not active. Nothing is wrong with the request or
      the transaction, which may be resent once the subscription is active again.
    - ``fatal``: the request itself is wrong; sending it again cannot fix it. The TRAN
      errors about the request's names and fields (31 unknown destination, 32 unknown
      subscription, 33 destination not of the subscription, 38 no active destination,
      39-43 fields a TRAN must leave empty or zero), and the input-message format errors
      any request can get (10 different reply destinations, 18 different tokens, 25
      reserved fields not zero, 26 and 30 unknown destination or reply destination,
      45-48 and 50-54 a bad URBH/URBI length, version, byte order or reserved area, 55-57
      request types, 58 invalid reply destination, 88 and 108 unknown eye-catchers, 99 and
      100 fields this request type must not carry).
    - ``retry``: anything else, which may pass: another response code (e.g. 148, nucleus
      not active), a space shortage (3, 4), a truncated message (49: the transport may cut
      one message, not every copy), an unexpected message sequence number (87), and
      subcodes no source ties to prior-transaction requests.
    """
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
