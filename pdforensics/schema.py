"""Column contracts between the stages: source -> records -> lines/events.

Every stage produces frames with exactly these columns and dtypes, so the next
stage (and DuckDB) can rely on them. Change a name here and grep for it.
"""

from __future__ import annotations

import polars as pl

from pdforensics.schema_version import SCHEMA_VERSION  # noqa: F401 - the contract's version (bump it there)

# What every source yields, one row per journal entry or file line.
RECORD_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),  # human label: "journal", "journal:/var/log/journal", "file:/x/prefill.log"
    "source_key": pl.String(),  # dedup namespace: journal seqnum id (cursor s=) or file identity
    "seq": pl.Int64(),  # position inside source_key: journal seqnum (cursor i=) or byte offset
    "cursor": pl.String(),  # journal cursor, NULL for files
    "ts_us": pl.Int64(),  # journal __REALTIME_TIMESTAMP (UTC us), NULL for plain files
    "host": pl.String(),
    "unit": pl.String(),  # systemd unit the line belongs to (UNIT= for pid 1 lines)
    "pid": pl.Int64(),
    "boot_id": pl.String(),
    "invocation_id": pl.String(),
    "syslog_identifier": pl.String(),
    "priority": pl.Int8(),
    "message": pl.String(),
}

# Input that could not be read as a record at all.
REJECT_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String(),
    "position": pl.String(),  # "line 12", "byte 4096", a cursor
    "reason": pl.String(),
    "sample": pl.String(),  # first 200 characters, escaped
}

# Typed event fields a catalog pattern may capture (named group or `fields` key).
# Names not listed here land in events.extra (JSON).
EVENT_FIELDS: dict[str, pl.DataType] = {
    # identity
    "rid": pl.String(),
    "bootstrap_room": pl.UInt64(),
    "bootstrap_host": pl.String(),
    "reason": pl.String(),
    "state": pl.String(),  # KVPoll.* state named by the line
    "state_code": pl.Int16(),  # the integer KVPoll value a line prints instead (KVPOLL_STATES names it)
    "timeout_kind": pl.String(),  # which upstream timeout ended the request (bootstrap_timeout, ...)
    "watchdog_queue": pl.String(),  # the queue a watchdog line names (inflight, bootstrap, transfer, prealloc)
    "rank": pl.Int16(),  # rank=N inside failure lines
    "dwell_s": pl.Float64(),
    "timeout_s": pl.Float64(),
    "count": pl.Int64(),  # Suppressed N / Remaining N / N requests affected
    "rids": pl.String(),  # remaining_rids=[...] verbatim
    "session": pl.String(),
    "addr": pl.String(),
    "level": pl.String(),  # level named by the line itself (router, uvicorn, custom formats)
    "target": pl.String(),  # router module / glog file:line
    "finish_type": pl.String(),  # finish_reason type of Finish: lines (length|abort|stop)
    "req_type": pl.String(),  # ReqTimeStats type=prefill|decode|unified
    "http_method": pl.String(),
    "http_path": pl.String(),
    "http_status": pl.Int16(),
    "client": pl.String(),
    "version": pl.String(),
    # run-time logging changes (Config logging: ...); NULL = left unchanged by that call
    "log_requests": pl.Boolean(),
    "log_requests_level": pl.Int16(),
    "log_level": pl.String(),
    # stats lines (prefill and decode batches, all versions)
    "new_seq": pl.Int64(),
    "new_token": pl.Int64(),
    "cached_token": pl.Int64(),
    "running_req": pl.Int64(),
    "queue_req": pl.Int64(),
    "pending_token": pl.Int64(),
    "bootstrap_req": pl.Int64(),
    "inflight_req": pl.Int64(),
    "optimistic_req": pl.Int64(),
    "prealloc_req": pl.Int64(),
    "transfer_req": pl.Int64(),
    "retracted_req": pl.Int64(),
    "num_token": pl.Int64(),
    "full_token": pl.Int64(),
    "swa_token": pl.Int64(),
    "token_usage": pl.Float64(),
    "full_token_usage": pl.Float64(),
    "swa_token_usage": pl.Float64(),
    "preallocated_usage": pl.Float64(),
    "accept_len": pl.Float64(),
    "cuda_graph": pl.Boolean(),
    "gen_throughput": pl.Float64(),
    "input_throughput": pl.Float64(),
    # request time stats
    "input_len": pl.Int64(),
    "output_len": pl.Int64(),
    "entry_time_us": pl.Int64(),  # wall clock the line itself reports (entry_time=epoch)
    "bootstrap_ms": pl.Float64(),
    "queue_ms": pl.Float64(),
    "forward_ms": pl.Float64(),
    "transfer_ms": pl.Float64(),
    "e2e_latency_s": pl.Float64(),
}

ENGINES = ("prefill", "decode", "router", "unified", "other")  # unified: a non-PD server

# KVPoll (0.5.23 srt/disaggregation/base/conn.py, unchanged since 0.4.6): lines that print the
# integer (slime's `state=3`) get state_code; this names it.
KVPOLL_STATES: dict[int, str] = {
    0: "KVPoll.Failed",
    1: "KVPoll.Bootstrapping",
    2: "KVPoll.WaitingForInput",
    3: "KVPoll.Transferring",
    4: "KVPoll.Success",
}

# `lines`: every stored record.  (DuckDB DDL lives in store.py.)
LINE_COLUMNS = [
    "line_id", "ingest_id", "source", "source_key", "seq", "cursor",
    "host", "unit", "engine", "pid", "boot_id", "invocation_id", "syslog_identifier", "priority",
    "ts_us", "app_ts_us", "ts_origin", "app_ts_precision_us",
    "dp_rank", "tp_rank", "pp_rank", "ep_rank",
    "message", "event", "entry", "parse_error", "cont_of",
]  # fmt: skip

# `events`: one row per recognised line.
EVENT_BASE_COLUMNS = [
    "line_id", "ts_us", "app_ts_us", "host", "unit", "engine", "pid", "invocation_id",
    "boot_id", "dp_rank", "tp_rank", "event", "entry",
]  # fmt: skip
EVENT_COLUMNS = EVENT_BASE_COLUMNS + list(EVENT_FIELDS) + ["extra"]


def empty_records() -> pl.DataFrame:
    return pl.DataFrame(schema=RECORD_SCHEMA)


def empty_rejects() -> pl.DataFrame:
    return pl.DataFrame(schema=REJECT_SCHEMA)
