-- Everything both engines logged about each request, aggregated once per bootstrap_room.
-- Times are on the reference clock (t_us). p_* = prefill side, d_* = decode side.
-- Failure lines are printed by several TP ranks: each fact is kept once per request, with the
-- ranks that reported it.
--
-- Two passes, for speed: the lines every request has (Receive:, Finish:, ReqTimeStats) in one;
-- failure, abort and watchdog lines, which few requests have, in a second pass over just those.
-- The first pass reads the `rooms` table (those lines folded per room at ingest, on each host's
-- own clock): each side is moved by its host's offset and kept when the window holds all of its
-- lines. A room is aggregated from its lines instead when the table cannot answer for it exactly:
-- a line stored after it was folded (meta.folded_upto), a line with no time, a side on two hosts,
-- or a side the window cuts.
CREATE OR REPLACE VIEW room_facts AS
WITH o AS MATERIALIZED (SELECT unnest(host_offsets, recursive := true) FROM context),
upto AS MATERIALIZED (FROM pdf_folded_upto()),
sides AS NOT MATERIALIZED (
    -- fit: 'in' (the window holds every line of the side), 'out' (none, or no such side), 'cut'
    SELECT r.*, po.offset_us AS p_off, dof.offset_us AS d_off,
        CASE WHEN r.p_first_ts IS NULL OR po.host IS NULL OR r.p_last_ts < po.lo_us OR r.p_first_ts > po.hi_us THEN 'out'
             WHEN r.p_host_lo = r.p_host_hi AND r.p_first_ts >= po.lo_us AND r.p_last_ts <= po.hi_us THEN 'in'
             ELSE 'cut' END AS p_fit,
        CASE WHEN r.d_first_ts IS NULL OR dof.host IS NULL OR r.d_last_ts < dof.lo_us OR r.d_first_ts > dof.hi_us THEN 'out'
             WHEN r.d_host_lo = r.d_host_hi AND r.d_first_ts >= dof.lo_us AND r.d_last_ts <= dof.hi_us THEN 'in'
             ELSE 'cut' END AS d_fit
    FROM rooms AS r
    LEFT JOIN o AS po ON po.host = r.p_host_lo
    LEFT JOIN o AS dof ON dof.host = r.d_host_lo
),
redo AS MATERIALIZED (
    SELECT bootstrap_room FROM sides WHERE untimed OR p_fit = 'cut' OR d_fit = 'cut'
    UNION
    SELECT e.bootstrap_room FROM events AS e, upto WHERE e.line_id > upto.line_id AND e.bootstrap_room IS NOT NULL
),
folded AS (
    SELECT s.bootstrap_room,
        CASE WHEN p_fit = 'in' AND p_common_last_ts IS NOT NULL THEN p_host_lo END AS p_host_c,
        CASE WHEN p_fit = 'in' THEN p_rid END AS prefill_rid_c,
        CASE WHEN p_fit = 'in' THEN p_recv_ts - p_off END AS p_recv,
        CASE WHEN p_fit = 'in' THEN p_done_ts - p_off END AS p_done,
        CASE WHEN p_fit = 'in' THEN p_stats_ts - p_off END AS p_stats_at,
        CASE WHEN p_fit = 'in' THEN p_inflight_entry_ts - p_off END AS p_inflight_entry,
        CASE WHEN p_fit = 'in' THEN p_bootstrap_done_ts - p_off END AS p_bootstrap_done,
        CASE WHEN d_fit = 'in' AND d_common_last_ts IS NOT NULL THEN d_host_lo END AS d_host_c,
        CASE WHEN d_fit = 'in' THEN d_rid END AS decode_rid_c,
        CASE WHEN d_fit = 'in' THEN d_recv_ts - d_off END AS d_recv,
        CASE WHEN d_fit = 'in' THEN d_done_ts - d_off END AS d_done,
        CASE WHEN d_fit = 'in' THEN d_stats_ts - d_off END AS d_stats_at,
        CASE WHEN p_fit = 'in' THEN p_common_last_ts - p_off END AS p_last_c,
        CASE WHEN d_fit = 'in' THEN d_common_last_ts - d_off END AS d_last_c,
        CASE WHEN p_fit = 'in' THEN p_recvs END AS p_recvs,
        CASE WHEN d_fit = 'in' THEN d_recvs END AS d_recvs,
        CASE WHEN p_fit = 'in' THEN p_last_recv_ts - p_off END AS p_last_recv,
        CASE WHEN p_fit = 'in' THEN p_last_done_ts - p_off END AS p_last_done
    FROM sides AS s
    WHERE (s.p_fit = 'in' OR s.d_fit = 'in') AND s.bootstrap_room NOT IN (SELECT bootstrap_room FROM redo)
),
common AS (
    -- k: 1 prefill Receive:, 2 prefill Finish: (success: its KV was sent), 4 prefill ReqTimeStats,
    --    11/12/14 the same on decode
    SELECT bootstrap_room, host, rid, t_us,
        CASE event WHEN 'request_received' THEN 1 WHEN 'req_time_stats' THEN 4
                   WHEN 'request_finished' THEN CASE WHEN reason_kind IS NULL THEN 2 ELSE 3 END
                   ELSE 0 END
            + CASE WHEN engine = 'decode' THEN 10 ELSE 0 END AS k,
        CASE WHEN event = 'req_time_stats' THEN entry_time_us - offset_us END AS entry_t,
        bootstrap_ms, queue_ms, forward_ms
    FROM room_events
    WHERE bootstrap_room IN (SELECT bootstrap_room FROM redo)
),
aggregated AS (
    -- each aggregate touches only the lines its FILTER selects: with ~4 lines per request, the
    -- fewer touched, the faster (first/last and the level are derived below instead)
    SELECT
        bootstrap_room,
        any_value(host) FILTER (WHERE k IN (1, 2, 4)) AS p_host_c,
        any_value(rid) FILTER (WHERE k IN (1, 2, 4)) AS prefill_rid_c,
        min(t_us) FILTER (WHERE k = 1) AS p_recv,
        min(t_us) FILTER (WHERE k = 2) AS p_done,
        min(t_us) FILTER (WHERE k = 4) AS p_stats_at,
        -- L2: inflight entry = bootstrap-queue entry (its wall clock) + bootstrap + waiting + forward
        min(entry_t + ((coalesce(bootstrap_ms, 0) + coalesce(queue_ms, 0) + coalesce(forward_ms, 0)) * 1000)::BIGINT)
            FILTER (WHERE k = 4) AS p_inflight_entry,
        min(entry_t + (coalesce(bootstrap_ms, 0) * 1000)::BIGINT) FILTER (WHERE k = 4) AS p_bootstrap_done,
        any_value(host) FILTER (WHERE k IN (11, 12, 14)) AS d_host_c,
        any_value(rid) FILTER (WHERE k IN (11, 12, 14)) AS decode_rid_c,
        min(t_us) FILTER (WHERE k = 11) AS d_recv,
        min(t_us) FILTER (WHERE k = 12) AS d_done,
        min(t_us) FILTER (WHERE k = 14) AS d_stats_at,
        max(t_us) FILTER (WHERE k IN (1, 2, 4)) AS p_last_c,
        max(t_us) FILTER (WHERE k IN (11, 12, 14)) AS d_last_c,
        count(*) FILTER (WHERE k = 1) AS p_recvs,
        count(*) FILTER (WHERE k = 11) AS d_recvs,
        max(t_us) FILTER (WHERE k = 1) AS p_last_recv,
        max(t_us) FILTER (WHERE k IN (2, 4)) AS p_last_done
    FROM common
    GROUP BY bootstrap_room
),
-- A room two prefill hosts received (two deployments numbering rooms alike, a room reused): each
-- host's hold is its own (design.md, "Same request"), so one host's Finish: never ends another's.
-- The host that received it and logged no end of its own keeps it open.
split_open AS (
    SELECT bootstrap_room, arg_min(host, recv_t) AS p_open_host, min(recv_t) AS p_open_recv
    FROM (
        SELECT bootstrap_room, host, min(t_us) FILTER (WHERE k = 1) AS recv_t, bool_or(k IN (2, 4)) AS done
        FROM common WHERE k IN (1, 2, 4) GROUP BY ALL
    )
    GROUP BY bootstrap_room
    HAVING count(*) > 1 AND bool_or(recv_t IS NOT NULL AND NOT done)
),
facts AS (
    SELECT * FROM folded
    UNION ALL BY NAME
    SELECT * FROM aggregated
),
rare_lines AS (
    -- k: 3 prefill Finish: abort, 5 Prefill bootstrap failed, 6 Prefill transfer failed or a NIXL
    --    per-room error, 7 the watchdog's line, 8 L3 `Abort <queue> request.` on prefill,
    --    13 decode Finish: abort, 15 Decode handshake failed, 16 Decode transfer failed
    -- rk: 1 abort, 2 failure, 3 propagated from another rank (no reason of its own), 4 the watchdog
    SELECT *, engine = 'prefill' AS is_p,
        CASE event
            WHEN 'request_finished' THEN CASE WHEN engine = 'prefill' THEN 3 ELSE 13 END
            WHEN 'prefill_bootstrap_failed' THEN 5
            WHEN 'prefill_transfer_failed' THEN 6
            WHEN 'transfer_error' THEN 6
            WHEN 'watchdog_fired' THEN 7
            WHEN 'abort_request' THEN 8
            WHEN 'decode_handshake_failed' THEN 15
            WHEN 'decode_transfer_failed' THEN 16
            WHEN 'decode_watchdog_fired' THEN 17
            WHEN 'retract_abort' THEN 18
        END AS k,
        CASE reason_kind WHEN 'abort' THEN 1 WHEN 'failure' THEN 2 WHEN 'propagated' THEN 3 WHEN 'watchdog' THEN 4
                         WHEN 'retract' THEN 5 END AS rk
    FROM pdf_room_lines(true)
    WHERE event IN ('request_finished', 'prefill_bootstrap_failed', 'prefill_transfer_failed', 'transfer_error',
                    'watchdog_fired', 'abort_request', 'decode_handshake_failed', 'decode_transfer_failed',
                    'decode_watchdog_fired', 'retract_abort')
      AND reason_kind IS NOT NULL
),
rare AS (
    SELECT
        bootstrap_room,
        min(t_us) FILTER (WHERE k = 5) AS p_boot_failed,
        min(t_us) FILTER (WHERE k = 6 AND rk <> 4) AS p_xfer_failed,
        min(t_us) FILTER (WHERE k = 3) AS p_finish_abort,
        -- the prefill Finish of a failed request carries the whole failure line as its abort message
        arg_min(reason, t_us) FILTER (WHERE k = 3) AS p_finish_reason,
        min(t_us) FILTER (WHERE is_p AND rk = 1) AS p_abort_at,
        bool_or(rk = 1) FILTER (WHERE k = 6) AS p_xfer_abort,
        bool_or(rk = 1) FILTER (WHERE k = 5) AS p_boot_abort,
        coalesce(bool_or(rk = 1) FILTER (WHERE is_p), false) AS p_any_abort,
        coalesce(bool_or(rk = 2) FILTER (WHERE is_p), false) AS p_any_failure,
        coalesce(bool_or(rk = 3) FILTER (WHERE is_p), false) AS p_any_propagated,
        -- a rank that only propagated another rank's failure still says so ("... from another rank")
        coalesce(arg_min(reason, t_us) FILTER (WHERE is_p AND rk IN (1, 2, 4)),
                 arg_min(reason, t_us) FILTER (WHERE is_p AND rk = 3)) AS p_reason,
        -- SGLang's own timeout that ended it (schema: timeout_kind), if one did
        arg_min(timeout_kind, t_us) FILTER (WHERE timeout_kind IS NOT NULL) AS upstream_timeout,
        list_sort(list(DISTINCT coalesce(rank, tp_rank)) FILTER (WHERE k IN (5, 6))) AS p_fail_ranks,
        -- L3 debug: `Abort <queue> request.` on prefill names the queue the abort hit
        min(state) FILTER (WHERE k = 8) AS p_abort_queue,
        min(t_us) FILTER (WHERE k = 8) AS p_abort_req_at,
        -- the watchdog
        min(t_us) FILTER (WHERE k = 7) AS wd_at,
        -- a failure line naming the watchdog (its own rank's, or decode's copy of prefill's reason)
        min(t_us) FILTER (WHERE rk = 4) AS wd_reason_at,
        max(dwell_s) FILTER (WHERE k = 7) AS wd_dwell_s,
        min(state) FILTER (WHERE k = 7) AS wd_state,
        max(timeout_s) FILTER (WHERE k = 7) AS wd_timeout_s,
        list_sort(list(DISTINCT tp_rank) FILTER (WHERE k = 7)) AS wd_ranks,
        count(DISTINCT tp_rank) FILTER (WHERE k = 7) AS wd_n_ranks,
        -- the patch checks the deadline before the all-reduce, so every rank should fire in the same second
        count(DISTINCT coalesce(app_ts_us, ts_us) // 1000000) FILTER (WHERE k = 7) <= 1 AS wd_same_second,
        min(t_us) FILTER (WHERE k = 15) AS d_hs_failed,
        min(t_us) FILTER (WHERE k = 16) AS d_xfer_failed,
        bool_or(rk = 1) FILTER (WHERE k = 16) AS d_xfer_abort,
        min(t_us) FILTER (WHERE k = 13) AS d_finish_abort,
        min(t_us) FILTER (WHERE NOT is_p AND rk = 1) AS d_abort_at,
        coalesce(bool_or(rk = 1) FILTER (WHERE NOT is_p), false) AS d_any_abort,
        coalesce(bool_or(rk = 2) FILTER (WHERE NOT is_p), false) AS d_any_failure,
        coalesce(bool_or(rk = 3) FILTER (WHERE NOT is_p), false) AS d_any_propagated,
        coalesce(arg_min(reason, t_us) FILTER (WHERE NOT is_p AND rk IN (1, 2, 4)),
                 arg_min(reason, t_us) FILTER (WHERE NOT is_p AND rk = 3)) AS d_reason,
        -- the decode-side watchdog (another dialect's) released its decode leg; a decode retraction aborted it
        min(t_us) FILTER (WHERE k = 17) AS d_wd_at,
        min(t_us) FILTER (WHERE k = 18) AS d_retracted_at,
        list_sort(list(DISTINCT coalesce(rank, tp_rank)) FILTER (WHERE k IN (15, 16))) AS d_fail_ranks,
        bool_or(k = 8) AS debug_lines,
        -- the prefill's last terminal line (a later Receive: opens another leg)
        max(t_us) FILTER (WHERE k IN (3, 5, 6, 7)) AS p_last_end_r,
        any_value(host) FILTER (WHERE is_p) AS p_host_r,
        any_value(rid) FILTER (WHERE is_p) AS prefill_rid_r,
        min(t_us) FILTER (WHERE is_p) AS p_first_r,
        max(t_us) FILTER (WHERE is_p) AS p_last_r,
        any_value(host) FILTER (WHERE NOT is_p) AS d_host_r,
        any_value(rid) FILTER (WHERE NOT is_p) AS decode_rid_r,
        min(t_us) FILTER (WHERE NOT is_p) AS d_first_r,
        max(t_us) FILTER (WHERE NOT is_p) AS d_last_r
    FROM rare_lines
    GROUP BY bootstrap_room
)
SELECT
    coalesce(f.bootstrap_room, r.bootstrap_room) AS bootstrap_room,
    coalesce(so.p_open_host, f.p_host_c, r.p_host_r) AS p_host,
    coalesce(f.prefill_rid_c, r.prefill_rid_r) AS prefill_rid,
    least(f.p_recv, f.p_done, f.p_stats_at, r.p_first_r) AS p_first,
    greatest(f.p_last_c, r.p_last_r) AS p_last,
    f.p_recv, f.p_done, f.p_stats_at, f.p_inflight_entry, f.p_bootstrap_done,
    coalesce(f.d_host_c, r.d_host_r) AS d_host,
    coalesce(f.decode_rid_c, r.decode_rid_r) AS decode_rid,
    least(f.d_recv, f.d_done, f.d_stats_at, r.d_first_r) AS d_first,
    greatest(f.d_last_c, r.d_last_r) AS d_last,
    f.d_recv, f.d_done, f.d_stats_at,
    -- legs: Receive: lines on each side (a DeepSeek-V4 rebootstrap sends the room to the prefill
    -- again with the decode's rid; n > 1 and duplicate rooms share one), at least one per side seen
    greatest(coalesce(f.p_recvs, 0), CASE WHEN coalesce(f.p_host_c, r.p_host_r) IS NOT NULL OR f.p_done IS NOT NULL
                                          OR r.p_first_r IS NOT NULL THEN 1 ELSE 0 END)
      + greatest(coalesce(f.d_recvs, 0), CASE WHEN coalesce(f.d_host_c, r.d_host_r) IS NOT NULL OR f.d_done IS NOT NULL
                                              OR r.d_first_r IS NOT NULL THEN 1 ELSE 0 END) AS legs,
    coalesce(so.p_open_recv, f.p_last_recv) AS p_last_recv,
    -- a later prefill leg is open: its Receive: came after every prefill end line; or a second
    -- prefill host received it and never ended its side
    coalesce(f.p_last_recv > greatest(f.p_last_done, r.p_last_end_r), false) OR so.p_open_host IS NOT NULL AS p_reopened,
    r.* EXCLUDE (bootstrap_room, debug_lines, p_last_end_r, p_any_abort, p_any_failure, p_any_propagated,
                 d_any_abort, d_any_failure, d_any_propagated, p_host_r, prefill_rid_r, p_first_r, p_last_r,
                 d_host_r, decode_rid_r, d_first_r, d_last_r),
    coalesce(r.p_any_abort, false) AS p_any_abort,
    coalesce(r.p_any_failure, false) AS p_any_failure,
    coalesce(r.p_any_propagated, false) AS p_any_propagated,
    coalesce(r.d_any_abort, false) AS d_any_abort,
    coalesce(r.d_any_failure, false) AS d_any_failure,
    coalesce(r.d_any_propagated, false) AS d_any_propagated,
    -- evidence level of this request: debug lines, time stats, request log, else failure lines only
    CASE
        WHEN r.debug_lines THEN 'L3'
        WHEN f.p_stats_at IS NOT NULL OR f.d_stats_at IS NOT NULL THEN 'L2'
        WHEN coalesce(f.p_recv, f.p_done, f.d_recv, f.d_done, r.p_finish_abort, r.d_finish_abort) IS NOT NULL THEN 'L1'
        ELSE 'L0'
    END AS evidence_level
-- a room named only by an abort line without its room (context.abort_rooms) has rare lines alone
FROM facts AS f
FULL JOIN rare AS r ON r.bootstrap_room = f.bootstrap_room
LEFT JOIN split_open AS so ON so.bootstrap_room = coalesce(f.bootstrap_room, r.bootstrap_room);
