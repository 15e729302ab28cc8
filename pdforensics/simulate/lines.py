"""Exact SGLang line texts by version (shared/sglang-log-reference.md §1-§6, design.md §4).

Everything here returns the message body *after* the ``[time ranks] `` prefix, which the
renderer adds from the host's local clock.
"""

from __future__ import annotations

from pdforensics.simulate.model import (
    V0_5_9,
    V0_5_10,
    V0_5_12,
    V0_5_18,
    V0_5_23,
    EngineCfg,
)

WATCHDOG_ENV = "SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT"
FAKE_BOOTSTRAP_HOST = "2.2.2.2"


def f2(x: float) -> str:
    return f"{x:.2f}"


# ---- stats lines (reference §2.1-§2.3) ------------------------------------------------------


def prefill_usage(eng: EngineCfg, usage: float) -> str:
    if eng.swa:
        return f"full token usage: {f2(usage)}, swa token usage: {f2(min(1.0, usage * 2.4))}, "
    return f"token usage: {f2(usage)}, "


def prefill_stats(
    eng: EngineCfg,
    *,
    new_seq: int,
    new_tok: int,
    cached: int,
    usage: float,
    queue: int,
    pending: int,
    boot: int,
    inflight: int,
    thr: float,
    gauge: bool = True,
) -> str:
    v = eng.version
    if not gauge:  # a build whose batch line is the unified layout: no PD queue fields
        return unified_prefill_stats(new_seq, new_tok, usage, queue, thr)
    head = f"#new-seq: {new_seq}, #new-token: {new_tok}, #cached-token: {cached}, "
    usage_msg = prefill_usage(eng, usage)
    if v < (0, 5, 4):  # 0.5.3: printed when the batch is scheduled, no throughput
        return (
            f"Prefill batch. {head}{usage_msg}#running-req: 0, #queue-req: {queue}, "
            f"#prealloc-req: {boot}, #inflight-req: {inflight}, "
        )
    if v < V0_5_9:  # 0.5.6 / 0.5.8
        return (
            f"Prefill batch, {head}{usage_msg}#running-req: 0, #queue-req: {queue}, "
            f"#prealloc-req: {boot}, #inflight-req: {inflight}, input throughput (token/s): {f2(thr)}, "
        )
    if v < V0_5_12:  # 0.5.10-0.5.11 (real-logs/09, /10)
        return (
            f"Prefill batch, {head}{usage_msg}#running-req: 0, #queue-req: {queue}, "
            f"#prealloc-req: {boot}, #inflight-req: {inflight}, cuda graph: False, "
            f"input throughput (token/s): {f2(thr)}"
        )
    optimistic = "#optimistic-req: 0, " if v >= V0_5_18 else ""
    return (
        f"Prefill batch, {head}{usage_msg}#running-req: 0, #queue-req: {queue}, #pending-token: {pending}, "
        f"#bootstrap-req: {boot}, #inflight-req: {inflight}, {optimistic}cuda graph: False, "
        f"input throughput (token/s): {f2(thr)}"
    )


def decode_stats(
    eng: EngineCfg,
    *,
    running: int,
    tokens: int,
    prealloc: int,
    transfer: int,
    queue: int,
    thr: float,
    accept_len: float,
) -> str:
    v = eng.version
    usage = tokens / eng.max_total_tokens
    if eng.swa:
        swa_tok = min(tokens, running * 4096)
        tok_msg = (
            f"#full token: {tokens}, full token usage: {f2(usage)}, "
            f"#swa token: {swa_tok}, swa token usage: {f2(min(1.0, swa_tok / (eng.max_total_tokens / 4)))}, "
        )
    else:
        tok_msg = f"#token: {tokens}, token usage: {f2(usage)}, "
    spec = ""
    if eng.spec:
        rate = (accept_len - 1) / 3
        spec = (
            f"accept len: {f2(accept_len)}, "
            if v < V0_5_9
            else f"accept len: {f2(accept_len)}, accept rate: {f2(rate)}, "
        )
    pre_usage = f2(min(1.0, transfer * 9000 / eng.max_total_tokens))
    pd = f"pre-allocated usage: {pre_usage}, #prealloc-req: {prealloc}, #transfer-req: {transfer}, #retracted-req: 0, "
    tail = f"cuda graph: True, gen throughput (token/s): {f2(thr)}, #queue-req: {queue}"
    if v < (0, 5, 4):
        return f"Decode batch. #running-req: {running}, {tok_msg}{spec}{pd}{tail}, "
    if v < V0_5_9:
        return f"Decode batch, #running-req: {running}, {tok_msg}{spec}{pd}{tail}, "
    return f"Decode batch, #running-req: {running}, {tok_msg}{spec}{pd}{tail}"


# ---- failures (reference §3.3/§3.4) and the watchdog patch (design §4) ----------------------


def kv_error(room: int, reason: str) -> str:
    return f"KVTransferError(bootstrap_room={room}): {reason}"


def prefill_failed(kind: str, rank: int, rid: str, room: int, reason: str) -> str:
    return (
        f"Prefill {kind} failed for request rank={rank} req.rid='{rid}' req.bootstrap_room={room} "
        f"with exception {kv_error(room, reason)}"
    )


def decode_failed(kind: str, rank: int, rid: str, room: int, reason: str) -> str:
    return (
        f"Decode {kind} failed for request rank={rank} decode_req.req.rid='{rid}' "
        f"decode_req.req.bootstrap_room={room} with exception {kv_error(room, reason)}"
    )


def watchdog_armed(timeout_s: int) -> str:
    return f"inflight watchdog armed: {WATCHDOG_ENV}={timeout_s}s"


def watchdog_reason(timeout_s: int, state: str) -> str:
    return f"inflight watchdog: stalled >{timeout_s}s in {state}"


def watchdog_fired(rid: str, room: int, timeout_s: int, state: str, dwell: float) -> str:
    return (
        f"inflight watchdog: req.rid='{rid}' req.bootstrap_room={room} stalled >{timeout_s}s in {state} "
        f"(dwell={dwell:.1f}s); forcing Failed + release"
    )


# KVPoll is a plain class of ints (0.5.23 srt/disaggregation/base/conn.py): slime prints the int
KVPOLL_CODE = {
    "KVPoll.Failed": 0,
    "KVPoll.Bootstrapping": 1,
    "KVPoll.WaitingForInput": 2,
    "KVPoll.Transferring": 3,
    "KVPoll.Success": 4,
}


def slime_prefill_timeout(dwell: float, code: int, rank: int, rid: str, room: int) -> str:
    """THUDM/slime sglang.patch (prefill inflight queue, ERROR; upstream-0.5.23.md §1.3)."""
    return (
        f"Prefill transfer timed out after {dwell:.1f}s (state={code}) for request rank={rank} "
        f"req.rid='{rid}' req.bootstrap_room={room}"
    )


def slime_decode_timeout(rank: int, rid: str, room: int, timeout_s: int) -> str:
    """slime's decode transfer-queue timeout (``%s`` formatting: plain rid=, room=)."""
    return f"Decode transfer timeout for request rank={rank} rid={rid} room={room} after {timeout_s}s"


BOOTSTRAP_TIMEOUT_HINT = (
    "Some requests timed out when bootstrapping, which means prefill instances fail to receive the KV "
    "indices from the decode instance of this request. If a greater mean TTFT is acceptable, you can "
    "'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition. "
)


def config_logging(log_requests: bool) -> str:
    """``Config logging: {obj=}`` (tokenizer_manager.py:2418): the root logger, no rank prefix."""
    return (
        f"Config logging: obj=ConfigureLoggingReq(log_requests={log_requests}, log_requests_level=None, "
        "log_requests_format=None, log_level=None)"
    )


def abort_finish_reason(message: str, status: int = 500) -> str:
    """FINISH_ABORT.to_json() as printed inside a Finish: line (a Python dict repr)."""
    return f"{{'type': 'abort', 'message': {message!r}, 'status_code': {status}, 'err_type': None}}"


# ---- lifecycle (reference §6) ----------------------------------------------------------------

SIGTERM = "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
READY = "The server is fired up and ready to roll!"
HEALTH_503 = "Health check request received during shutdown. Returning 503."


# Engine deaths (reference §6, sglang-upstream-0.5.23.md §2): the lines an engine's last moments
# leave, by family. The systemd lines that follow are in build.die().
SCHED_WATCHDOG = "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
SCHED_DEBUG = "Scheduler debug info:"
SIGQUIT_RUNNING = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."
SIGQUIT_0_4 = "Received sigquit from a child proces. It usually means the child failed."  # sic, 0.4.x


def ucx_segfault(host: str, pid: int, tid: int, addr: int) -> list[str]:
    """UCX's fatal-signal handler on stderr: no SGLang prefix, then a backtrace block."""
    return [
        f"[{host}:{pid}:0:{tid}] Caught signal 11 (Segmentation fault: address not mapped to object "
        f"at address 0x{addr:x})",
        f"==== backtrace (tid: {tid:6d}) ====",
        " 0  /opt/hpcx/ucx/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7f3c2a1b2c34]",
        " 1  /opt/hpcx/ucx/lib/libucs.so.0(+0x2f0ff) [0x7f3c2a1b30ff]",
        " 2  /lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f3c3c842520]",
        " 3  /opt/nixl/lib/x86_64-linux-gnu/plugins/libplugin_UCX.so(+0x1a2b3) [0x7f3b9e41a2b3]",
        "=================================",
    ]


def graceful(rids: list[str]) -> str:
    return (
        f"Gracefully exiting... Remaining number of requests {len(rids)}. "
        f"Remaining requests remaining_rids={rids!r}."
    )


def uvicorn(msg: str, level: str = "INFO") -> str:
    return f"{(level + ':').ljust(9)} {msg}"


def access(client: str, method: str, path: str, status: int) -> str:
    phrase = {200: "OK", 503: "Service Unavailable", 404: "Not Found"}[status]
    return uvicorn(f'{client} - "{method} {path} HTTP/1.1" {status} {phrase}')


def server_args(eng: EngineCfg) -> str:
    """A shortened but field-ordered ServerArgs repr (the real one is several KB)."""
    role = eng.role
    level0 = ", log_requests=True, log_requests_level=0" if eng.log_requests else ", log_requests=False"
    fields = [
        f"model_path='{eng.model}'",
        f"tokenizer_path='{eng.model}'",
        "tokenizer_mode='auto'",
        "skip_tokenizer_init=False",
        "load_format='auto'",
        "trust_remote_code=True",
        "dtype='auto'",
        f"context_length={eng.context_len}",
        "host='0.0.0.0'",
        f"port={eng.http_port}",
        "mem_fraction_static=0.82",
        f"max_running_requests={256 if role == 'prefill' else 512}",
        f"chunked_prefill_size={eng.max_prefill_tokens}",
        f"max_prefill_tokens={eng.max_prefill_tokens}",
        "schedule_policy='fcfs'",
        f"tp_size={eng.tp}",
        "pp_size=1",
        "stream_interval=1",
        "random_seed=42",
        "watchdog_timeout=300",
        f"log_level='info'{level0}",
        f"enable_request_time_stats_logging={eng.time_stats}",
        "enable_metrics=True",
        f"decode_log_interval={eng.decode_log_interval}",
        f"dp_size={eng.dp}",
        f"enable_dp_attention={eng.dp > 1}",
        f"ep_size={eng.tp if eng.ep else 1}",
        "speculative_algorithm='EAGLE'" if eng.spec else "speculative_algorithm=None",
        f"disaggregation_mode='{role}'",
        f"disaggregation_transfer_backend='{eng.backend}'",
        f"disaggregation_bootstrap_port={eng.bootstrap_port}",
        "disaggregation_ib_device=None",
    ]
    return "server_args=ServerArgs(" + ", ".join(fields) + ")"


def max_tokens_line(eng: EngineCfg) -> str:
    return (
        f"max_total_num_tokens={eng.max_total_tokens}, chunked_prefill_size={eng.max_prefill_tokens}, "
        f"max_prefill_tokens={eng.max_prefill_tokens}, max_running_requests="
        f"{256 if eng.role == 'prefill' else 512}, context_len={eng.context_len}, available_gpu_mem=9.87 GB"
    )


def warmup_lines(eng: EngineCfg) -> list[str]:
    if eng.version < V0_5_10:  # the pre-0.5.5 warmup message (real-logs/04)
        return [
            f"End of {eng.role} disaggregation mode warmup with status 200, resp: [{{'text': '', "
            f"'meta_info': {{'id': '{'0' * 32}', 'finish_reason': {{'type': 'length', 'length': 1}}}}}}]"
        ]
    return ["Start of pd disaggregation warmup ...", "End of disaggregation warmup"]


# ---- the request logger (reference §5.1), level 0: metadata only ------------------------------

# Dataclass field order of GenerateReqInput as it renders at --log-requests-level 0 (text,
# input_ids, sampling_params ... are skipped).  ``{…}`` slots are filled per request.
_OBJ_NEW = (
    "rid={rid}, http_worker_ipc=None, use_audio_in_video=False, return_logprob=False, "
    "logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, return_text_in_logprobs=True, "
    "stream={stream}, log_metrics={log_metrics}, return_hidden_states=False, return_routed_experts=False, "
    "return_indexer_topk=False, routed_experts_start_len=0, modalities=[], session_params=None, "
    "lora_id=None, custom_logit_processor=None, positional_embed_overrides=None, "
    "bootstrap_host={bhost}, bootstrap_port={bport}, bootstrap_room={room}, bootstrap_pair_key=None, "
    "decode_tp_size=None, require_reasoning=False, routed_dp_rank=None, disagg_prefill_dp_rank=None, "
    "data_parallel_rank=None, background=False, conversation_id=None, priority=None, extra_key=None, "
    "routing_key=None, no_logs=False, custom_labels=None, return_bytes=False, return_entropy=False"
)
_OBJ_MID = (
    "rid={rid}, http_worker_ipc=None, return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, "
    "token_ids_logprob=None, return_text_in_logprobs=True, stream={stream}, log_metrics={log_metrics}, "
    "return_hidden_states=False, modalities=[], session_params=None, lora_id=None, "
    "custom_logit_processor=None, bootstrap_host={bhost}, bootstrap_port={bport}, bootstrap_room={room}, "
    "bootstrap_pair_key=None, data_parallel_rank=None, background=False, conversation_id=None, "
    "priority=None, extra_key=None, no_logs=False, custom_labels=None, return_bytes=False"
)
_OBJ_OLD = (
    "rid={rid}, return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, "
    "return_text_in_logprobs=False, stream={stream}, log_metrics={log_metrics}, return_hidden_states=False, "
    "modalities=[], session_params=None, lora_path=None, lora_id=None, custom_logit_processor=None, "
    "bootstrap_host={bhost}, bootstrap_port={bport}, bootstrap_room={room}, bootstrap_pair_key=None, "
    "data_parallel_rank=None, background=False"
)


def obj_template(eng: EngineCfg) -> str:
    if eng.version >= V0_5_18:
        body = _OBJ_NEW
    elif eng.version >= V0_5_10:
        body = _OBJ_MID
    else:
        body = _OBJ_OLD
    return "GenerateReqInput(" + body + ")"


def unified_obj(eng: EngineCfg, rid: str) -> str:
    """A non-PD server's request: every bootstrap field None (real-logs/13)."""
    return obj_template(eng).format(
        rid=f"'{rid}'", stream="True", log_metrics="True", bhost="None", bport="None", room="None"
    )


def unified_prefill_stats(new_seq: int, new_tok: int, usage: float, queue: int, thr: float) -> str:
    """0.5.12+ `Prefill batch` of a non-PD server: no #bootstrap-req / #inflight-req (reference §2.1)."""
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tok}, #cached-token: 0, token usage: {f2(usage)}, "
        f"#running-req: 0, #queue-req: {queue}, #pending-token: 0, cuda graph: False, "
        f"input throughput (token/s): {f2(thr)}"
    )


def unified_decode_stats(running: int, tokens: int, usage: float, thr: float) -> str:
    """0.5.9+ `Decode batch` of a non-PD server: no pre-allocated / #prealloc-req / #transfer-req."""
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {f2(usage)}, "
        f"cuda graph: True, gen throughput (token/s): {f2(thr)}, #queue-req: 0"
    )


def meta_template(eng: EngineCfg) -> str:
    """The ``out={'meta_info': …}`` part of a Finish: line (level 0 drops text and output_ids)."""
    if eng.version >= V0_5_23:
        return (
            "{{'meta_info': {{'id': {rid}, 'finish_reason': {finish}, 'prompt_tokens': {prompt}, "
            "'weight_version': 'default', 'num_retractions': 0, 'reasoning_tokens': 0, "
            "'completion_tokens': {completion}, 'cached_tokens': {cached}, 'e2e_latency': {e2e}, "
            "'response_sent_to_client_ts': {sent}}}}}"
        )
    if eng.version >= V0_5_10:
        return (
            "{{'meta_info': {{'id': {rid}, 'finish_reason': {finish}, 'prompt_tokens': {prompt}, "
            "'weight_version': 'default', 'total_retractions': 0, 'completion_tokens': {completion}, "
            "'cached_tokens': {cached}, 'e2e_latency': {e2e}, 'response_sent_to_client_ts': {sent}}}}}"
        )
    return (
        "{{'meta_info': {{'id': {rid}, 'finish_reason': {finish}, 'prompt_tokens': {prompt}, "
        "'completion_tokens': {completion}, 'cached_tokens': {cached}, 'e2e_latency': {e2e}}}}}"
    )


def rts_template(eng: EngineCfg) -> str:
    """ReqTimeStats (0.5.12+; ``attempts=`` is newer than 0.5.18) - reference §5.3."""
    attempts = "attempts=0, " if eng.version > V0_5_18 else ""
    head = (
        "ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={in_len}, cached_input_len={cached}, "
        "output_len={out_len}, " + attempts + "type=" + eng.role + "): "
    )
    if eng.role == "prefill":
        return head + (
            "bootstrap_duration={boot_ms}ms, queue_duration={queue_ms}ms, forward_duration={fwd_ms}ms, "
            "entry_time={entry}, transfer_speed={speed} GB/s, transfer_total={total} MB"
        )
    return head + (
        "bootstrap_duration={boot_ms}ms, alloc_wait_duration={alloc_ms}ms, transfer_duration={xfer_ms}ms, "
        "queue_duration={queue_ms}ms, forward_duration={fwd_ms}ms, entry_time={entry}"
    )
