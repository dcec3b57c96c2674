"""What every column of the job's own tables means: the comments their Delta schemas carry.

One entry per column of ``SCHEMAS`` (and ``batch_id``): what it holds, where it comes from (the
replicator's DSECT field, or the job), its values where they are a list, and when it is null.
``DESCRIBE TABLE`` shows the text (``comment``: the meaning, then when it is null);
``DATA_DICTIONARY.md`` is generated from the same entries (``pipeline.ops.dictionary``).
tests/spark/typed/test_catalog_views.py, tests/e2e/test_cluster.py (every table of a job's
lake) and tests/unit/ops/test_dictionary.py hold every column to having one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Doc:
    """A column's meaning and when it is null (``never``: always set)."""

    text: str
    null: str = "never"

    def comment(self) -> str:
        """The Delta column comment: the meaning, then the nullability."""
        return f"{self.text} {'Never null.' if self.null == 'never' else f'Null {self.null}.'}"


_D = Doc
#: Columns with one meaning in every table that has them.
COMMON: dict[str, Doc] = {
    "subscription": _D("Subscription name (URBTSNAM; URBSSNAM on status rows): the replicator "
                       "subscription the row belongs to; empty for a destination-wide row "
                       "(a status naming no subscription)."),
    "destination": _D("Replicator destination (the topics.outputs entry whose topic carried "
                      "the message; the reply destination for replies)."),
    "epoch": _D("Replicator run of this (destination, subscription): 0 before the first "
                "STRT/REST seen, +1 at each replicator (re)start; tsnr restarts at 1 in a new "
                "epoch, so (destination, subscription, epoch, tsnr) names one transaction."),
    "tsnr": _D("Transaction sequence number (URBTTSNR) within (destination, subscription, "
               "epoch); 0 for initial-state pseudo-transactions."),
    "topic": _D("Kafka topic the message was read from."),
    "partition": _D("Kafka partition of the message (0: the job reads one-partition topics)."),
    "offset": _D("Kafka offset of the message."),
    "elem_index": _D("Position of the element in its message's element chain (0 = URBH)."),
    "batch_id": _D("Streaming micro-batch that landed the row (lineage; a restart from the "
                   "checkpoint continues the numbering)."),
    "dbid": _D("Adabas database id (URBTDBID, URBSDBID)."),
    "fnr": _D("Adabas file number (URBRFNR, URBSFNR)."),
}

_TIME = "UTC; the replicator's machine time corrected by replicator.tod_leap_seconds and " \
        "tod_utc_offset"

TABLE_DOCS: dict[str, str] = {
    "transactions": "One row per landed transaction (URBT … URBE), whole and once.",
    "records": "One row per record (URBR) of a landed transaction.",
    "images": "One row per data image (URBD) of a landed record: the raw bytes.",
    "status_events": "One row per status element (URBS) the replicator sent.",
    "gaps": "One row per transition of a hole in the transaction (or message) sequence; a "
            "gap's state is its row with the greatest (batch_id, seq).",
    "alerts": "One row per alert the job sent to topics.alerts.",
    "requests": "One row per request the job sent to the replicator's input queue (TRAN, "
                "INST per file, STAT).",
    "quarantine": "One row per input the job could not use, with its bytes and the reason.",
    "duplicates": "One row per dropped copy of a transaction or message already landed.",
    "layouts": "One row per GFFT (URBF + URBGs) received: a record layout version of a file.",
    "schema_events": "One row per utility/lifecycle event or layout change and the typed "
                     "table it concerns.",
    "file_status": "One row per file status transition (active, stale, dropped); a file's "
                   "status is its row with the greatest version.",
    "watermarks": "The consistency watermark per (destination, subscription, dbid) after "
                  "each batch that moved it; the latest row per key (by computed_at) is "
                  "current.",
    "kafka_sent": "One row per message the job sent to Kafka (a request, an alert), written "
                  "right after the producer's flush: a replayed batch sends nothing this "
                  "table shows sent. Made at the first send.",
}

COLUMNS: dict[str, dict[str, Doc]] = {
    "transactions": {
        "record_count": _D("Records in the transaction (URBTRCNT)."),
        "commit_time": _D(f"Commit (ET) time in Adabas (URBTTTIM), {_TIME}; for an "
                          "initial-state pseudo-transaction, when its chunk was read."),
        "processed_time": _D(f"End of subscription processing (URBTPTIM), {_TIME}.",
                             "when the replicator left it zero"),
        "sent_time": _D(f"When the message holding the URBT was sent (URBHTIME), {_TIME}.",
                        "when the replicator left it zero"),
        "initial_state": _D("URBTINST = 'Y': an initial-state pseudo-transaction (INST reply)."),
        "resent": _D("URBTPTRN = 'Y': resent by a prior-transaction (TRAN) request; carries "
                     "before images only."),
        "possibly_resent": _D("URBTRSND = 'Y': the replicator may have sent it before."),
        "origin": _D("How it reached the lake: 'live', 'resend' (answer to a TRAN request), "
                     "'initial_state' (answer to an INST request) or 'reconcile' (answer to "
                     "an INST of urbpipe reconcile, token RCN...)."),
        "token": _D("Request token (URBTRTOK) of an initial-state reply; blank otherwise."),
        "first_partition": _D("Kafka partition of the transaction's first message."),
        "first_offset": _D("Kafka offset of the transaction's first message."),
        "last_partition": _D("Kafka partition of its last message (URBC continuations)."),
        "last_offset": _D("Kafka offset of its last message."),
        "image_count": _D("URBD images landed for the transaction (rows in images)."),
        "landed_at": _D("When the job landed it (the job's clock, UTC)."),
    },
    "records": {
        "rsnr": _D("Record sequence number in the transaction (URBRRSNR)."),
        "isn": _D("Adabas ISN of the record (URBRISN)."),
        "type": _D("Record type (URBRTYP): 'I' insert, 'U' update, 'D' delete, 'R' "
                   "initial-state record."),
        "resend": _D("URBRRSND = 'Y': the record may have been sent before."),
        "rsp": _D("Adabas response code of the record (URBRRSP); 0 ok, 113 for an INST "
                  "record that no longer exists."),
        "subcode": _D("Response subcode (URBRSUBC)."),
        "record_time": _D(f"Last modification of the record (URBRTIME), {_TIME}.",
                          "when the replicator left it zero"),
        "dcnt": _D("Number of URBD images the replicator announced for the record "
                   "(URBRDCNT)."),
        "errc": _D("Subscription user exit error code (URBRERRC), blank without one.",
                   "for rows landed before the column existed"),
    },
    "images": {
        "rsnr": _D("Record sequence number of the image's record (URBRRSNR)."),
        "dsnr": _D("Data sequence number of the image within its record (URBDDSNR)."),
        "image_type": _D("URBDTYP: 'A' after image, 'B' before image, 'K' key before image."),
        "payload": _D("The image's bytes as the replicator sent them (decode with the file's "
                      "layout: pipeline.payload.decode_payload)."),
        "acode": _D("Alpha encoding of the data (URBTACOD; 0: the subscription's default code "
                    "page)."),
        "wcode": _D("Wide-character encoding of the data (URBTWCOD)."),
        "arc": _D("Architecture flags of the data (URBTARC): byte order and float format."),
    },
    "status_events": {
        "rt": _D("Request type (URBSRT) when the status answers a request (TRAN, STAT, INST "
                 "…); blank otherwise."),
        "st": _D("Status (URBSST): STRT, TERM, REST, TRSP, SUBS, INIT, CMPL, ERRO, C5DA, AUTI, "
                 "DEAC, REAC, LOST, LODS/LODE, UPDS/UPDE, RPLS/RPLE, SAVS/SAVE, RESS/RESE and the "
                 "others of pipeline/urb/codes.py."),
        "rsp": _D("Response code (URBSRSP); 131 with a subcode for a refused request."),
        "subc": _D("Response subcode (URBSSUBC)."),
        "token": _D("Request token (URBSRTOK) of the request answered; blank otherwise."),
        "inam": _D("Initial-state name (URBSINAM) of an INST reply; blank otherwise."),
        "snam": _D("Subscription name (URBSSNAM) the status names; blank when none."),
        "dnam": _D("Destination name (URBSDNAM) the status names; blank when none."),
        "tsnr": _D("Transaction sequence number the status names (URBSTSNR; SUBS: the last "
                   "one sent)."),
        "err_info": _D("Error information (URBSERRI)."),
        "data": _D("URBSDATA bytes (utility details, C5 user data …), in the message's byte "
                   "order (big_endian).", "without status data"),
        "time": _D(f"Status time (URBSTIME), {_TIME}.", "when zero"),
        "process_time": _D(f"Last transaction processed (URBSPTIM), {_TIME}.", "when zero"),
        "commit_time": _D(f"Last transaction commit, or the utility's time (URBSTTIM), {_TIME}.",
                          "when zero"),
        "sent_time": _D(f"When its message was sent (URBHTIME), {_TIME}.", "when zero"),
        "fields_json": _D("Every URBS field as JSON (the raw element, decoded)."),
        "received_at": _D("When the job read it (the job's clock, UTC)."),
        "big_endian": _D("Byte order of the message, which URBSDATA is written in."),
    },
    "gaps": {
        "gap_id": _D("The gap's id within (destination, subscription): stable over its "
                     "transitions."),
        "from_tsnr": _D("First missing tsnr (kind 'messages': first missing URBHMSNR)."),
        "to_tsnr": _D("Last missing tsnr (kind 'messages': last missing URBHMSNR)."),
        "state": _D("'open', 'requested' (TRAN sent), 'filled', 'unrecoverable' (given up: "
                    "critical alert), 'filled_late' (a given-up tsnr landed after all), 'lost' "
                    "(kind 'messages')."),
        "requests_sent": _D("TRAN requests sent for the gap so far."),
        "missing_count": _D("tsnrs of the gap still missing."),
        "opened_at": _D("When the gap opened (the job's clock, UTC)."),
        "updated_at": _D("When this transition happened (the job's clock, UTC)."),
        "closed_at": _D("When the gap ended.", "while it is open or requested"),
        "reason": _D("Why the transition happened (e.g. TRSP 131/35, settled by the restart).",
                     "when there is nothing to say"),
        "seq": _D("Order of the transitions within the batch."),
        "kind": _D("'tsnr' (missing transactions) or 'messages' (missing URBHMSNR message "
                   "numbers of the destination)."),
        "filled_tsnrs": _D("tsnrs of the gap that landed.", "before the gap ends"),
        "settled_tsnrs": _D("tsnrs of the gap given up (lost).", "before the gap ends"),
    },
    "alerts": {
        "idempotency_key": _D("Key that makes repeats of the alert harmless (also its Kafka "
                              "key)."),
        "kind": _D("What happened: gap_open, gap_requested, gap_filled, gap_unrecoverable, "
                   "gap_filled_late, messages_missing, lost_continuation, epoch_started, "
                   "status_lost, status_deac, request_rejected, storm_tripped, storm_resumed, "
                   "transaction_unplaced, messages_unseen, initial_state_*, table_files_high and "
                   "the others README \"Operating it\" lists."),
        "severity": _D("'info', 'warning' or 'critical'."),
        "message": _D("One line for a person."),
        "at": _D("When the alert was raised (UTC)."),
        "at_ms": _D("The same, Unix milliseconds."),
        "details": _D("The alert's details as JSON."),
    },
    "requests": {
        "tsnr": _D("The tsnr asked for (TRAN); STAT: the last tsnr landed when asked.",
                   "for INST, and for STAT before any landed"),
        "token": _D("Request token (URBIRTOK) sent."),
        "reply_destination": _D("Where the replicator answers (URBIRNAM)."),
        "attempt": _D("Attempt number (TRAN: round of the gap; STAT: its sequence)."),
        "gap_id": _D("The gap a TRAN request is for.", "for INST and STAT"),
        "requested_at": _D("When the request was made (the job's clock, UTC)."),
        "idempotency_key": _D("Key that makes repeats of the request harmless (its Kafka key)."),
        "kind": _D("'TRAN' (prior transaction), 'INST' (initial state, one row per file) or "
                   "'STAT' (subscription status)."),
        "initial_state": _D("Initial-state definition name (URBIINAM).", "except INST"),
        "dbid": _D("Database of the INST file.", "except INST"),
        "fnr": _D("File of the INST row.", "except INST"),
        "isns": _D("ISNs asked for (an empty list selects none of the file's records).",
                   "except INST"),
        "request_id": _D("Id shared by the rows of one request message (INST; 'stat:<n>').",
                         "for TRAN"),
    },
    "quarantine": {
        "source": _D("Where it was refused: 'decode' (a Kafka message the codec could not "
                     "read: replayable), 'reassembly' (inconsistent elements), 'gfft' (a GFFT "
                     "no layout could be built from), 'payload' (an image its layout could not "
                     "decode)."),
        "tsnr": _D("The transaction concerned.", "when none is known"),
        "reason": _D("Why, in one line."),
        "topic": _D("Kafka topic of the message.", "when not from one message"),
        "partition": _D("Kafka partition of the message.", "when not from one message"),
        "offset": _D("Kafka offset of the message.", "when not from one message"),
        "elem_index": _D("Position of the element in its message.", "for whole messages"),
        "eye": _D("Eye-catcher of the element refused (URBH, URBT, URBF …).",
                  "for whole messages"),
        "raw": _D("The refused bytes (message, element or image).", "when none were kept"),
        "fields_json": _D("What was understood of it, as JSON (keys, ISN …).",
                          "when nothing was"),
        "quarantined_at": _D("When the job quarantined it (the job's clock, UTC)."),
    },
    "duplicates": {
        "reason": _D("Why it is a copy (already landed in this epoch, a redelivered message "
                     "…); 'never landed …' marks a transaction that came out of order before "
                     "the first one placed: land it from here."),
        "dropped_at": _D("When the job dropped it (the job's clock, UTC)."),
    },
    "layouts": {
        "gfid": _D("GFFT id (URBFGFID) of the layout version."),
        "created": _D(f"Creation time of the version (URBFTIM1), {_TIME}."),
        "created_stck": _D("The same as the raw unsigned STCK, decimal digits."),
        "file_name": _D("File name (URBFFNAM) as the GFFT names it."),
        "field_count": _D("Number of URBG field descriptions."),
        "layout_json": _D("The record layout built from it (RecordLayout.to_dict) with the "
                          "GFFT's own column names."),
        "ddl": _D("Spark DDL of that layout."),
        "gfft_json": _D("Every URBF and URBG field as JSON."),
        "raw": _D("The URBF element's bytes."),
        "sent_time": _D(f"When its message was sent (URBHTIME), {_TIME}.", "when zero"),
        "received_at": _D("When the job read it (the job's clock, UTC)."),
    },
    "schema_events": {
        "event_id": _D("The event's id (the status element's Kafka position, or GFFT|… / "
                       "CONF|… for layout changes)."),
        "st": _D("Status (URBSST: AUTI, LODS, SAVS …), 'GFFT' for a layout version, 'CONF' "
                 "for a change a start made."),
        "dbid": _D("Database concerned.", "when the event names none"),
        "fnr": _D("File concerned.", "when the event names none"),
        "utility_type": _D("AUTI utility function code (URBSU).", "except AUTI"),
        "utility": _D("Its name (refresh_file, add_new_fields, …).", "except AUTI"),
        "detail_json": _D("The event's details as JSON.", "without details"),
        "action": _D("What the job did: truncate, add_columns, widen, mark_stale, "
                     "clear_stale, mark_dropped, rename, recorded, layout_version, "
                     "layout_refused, layout_conf."),
        "target_table": _D("The typed table the row is about.", "when no typed table is "
                           "concerned"),
        "result": _D("What happened to it (e.g. 'deleted 12 rows older than …').",
                     "when nothing was done"),
        "reason": _D("Why.", "when there is nothing to say"),
        "at": _D(f"When the event happened (its replicator time), {_TIME}.", "when unknown"),
        "received_at": _D("When the job read it (the job's clock, UTC).", "for a start's rows"),
        "seq": _D("Order of the rows within the batch."),
        "destination": _D("Replicator destination the status came on.", "for GFFT and CONF "
                          "rows"),
    },
    "file_status": {
        "status": _D("'active', 'stale' (rows may be wrong: reload the file) or 'dropped'."),
        "stale_kinds": _D("Why stale, comma-separated: load, update, replay, restore, "
                          "regenerate, lost, deactivated, decompression, layout.", "when active"),
        "reason": _D("What made the transition, in one line."),
        "since": _D("When the file entered this status (UTC)."),
        "file_name": _D("The file's name after an AUTI rename.", "before any"),
        "version": _D("Transition number of the file: the greatest is its status."),
        "truncated_before": _D("Cutoff of the latest refresh/define file: changes committed "
                               "before it never reach current_ again.", "before any"),
        "event_id": _D("The schema_events event that made it.", "for a start's rows"),
        "st": _D("Status (URBSST) or GFFT/CONF that made it."),
        "action": _D("The action that made it (mark_stale, clear_stale, truncate, "
                     "mark_dropped, rename …)."),
        "run_id": _D("The job run or start that wrote it."),
        "updated_at": _D("When the row was written (the job's clock, UTC)."),
        "seq": _D("Order of the rows within the batch."),
    },
    "kafka_sent": {
        "idempotency_key": _D("The message's idempotency key: join requests or alerts on it "
                              "to see which were sent."),
        "topic": _D("Kafka topic the message was sent to (the replicator's input topic, "
                    "topics.alerts)."),
        "kind": _D("What was sent: the request kind (TRAN, INST, STAT) or the alert's kind "
                   "(alerts.kind)."),
        "subscription": _D("Subscription the request or alert concerns.",
                           "for an alert of no subscription"),
        "destination": _D("Destination the request or alert concerns.",
                          "for an alert of no destination"),
        "sent_at": _D("When the producer's flush confirmed it (the job's clock, UTC)."),
        "app_id": _D("The streaming query run that sent it."),
    },
    "watermarks": {
        "dbid": _D("Database (URBTDBID) whose commit times the watermark bounds: each database "
                   "of a subscription has its own clock and its own watermark."),
        "watermark": _D("The consistency watermark: every transaction of this (destination, "
                        "subscription) from database dbid committed at or before it has landed "
                        "in every table, raw and typed, with no open gap before it; a time on "
                        "that database's clock: newest_commit less nucleus_lag_ms less 1 µs, "
                        "never moving back.",
                        "until one is known (nothing landed yet before the lowest open gap)"),
        "newest_commit": _D("Newest commit time (URBTTTIM) of the database among the "
                            "transactions before the lowest open gap, all landed.",
                            "before any landed there"),
        "nucleus_lag_ms": _D("The conf's stream.watermark.nucleus_lag_ms when the row was "
                             "computed: how late a cluster's nucleus may hand a commit over."),
        "held_by": _D("gap_id of the lowest open gap: transactions after it do not move the "
                      "watermark until it ends.", "when none is open"),
        "open_gaps": _D("Open gaps (kind 'tsnr') of the key after the batch."),
        "gap_ids": _D("The open gaps' ids, by position."),
        "gap_newest": _D("Per open gap, the database's newest commit time landed from the gap "
                         "up to the next open one: joins newest_commit when the gap ends "
                         "(null inside: none landed there)."),
        "computed_at": _D("When the batch's commits were done and the row computed (UTC)."),
    },
}


def column_doc(table: str, column: str) -> Doc:
    """The documentation of one column of one of the job's own tables (KeyError: none)."""
    own = COLUMNS[table]
    return own[column] if column in own else COMMON[column]


def comments(table: str, columns: list[str]) -> dict[str, str]:
    """Column → Delta comment for the given columns of ``table``."""
    return {c: column_doc(table, c).comment() for c in columns}
