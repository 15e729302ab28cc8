-- Everything both engines logged about each request, aggregated once per request: its
-- bootstrap_room, and its `holder` where two deployments share the room (see shared_rooms).
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
    SELECT s.bootstrap_room, '' AS holder,
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
common_lines AS (
    -- k: 1 prefill Receive:, 2 prefill Finish: (success: its KV was sent), 4 prefill ReqTimeStats,
    --    11/12/14 the same on decode
    SELECT bootstrap_room, host, engine, rid, t_us, bootstrap_host,
        CASE event WHEN 'request_received' THEN 1 WHEN 'req_time_stats' THEN 4
                   WHEN 'request_finished' THEN CASE WHEN reason_kind IS NULL THEN 2 ELSE 3 END
                   ELSE 0 END
            + CASE WHEN engine = 'decode' THEN 10 ELSE 0 END AS k,
        CASE WHEN event = 'req_time_stats' THEN entry_time_us - offset_us END AS entry_t,
        bootstrap_ms, queue_ms, forward_ms
    FROM room_events
    WHERE bootstrap_room IN (SELECT bootstrap_room FROM redo)
),
-- Identity is (deployment, room) (design.md, "Same request"). A room that two prefill hosts, or
-- two decode hosts, logged (two deployments numbering rooms alike, a room reused) is `shared`:
-- one request per prefill host (its `holder`; one host's Finish: never ends another's hold). A
-- decode host's side fits a holder when nothing rules it out: its lines name an address the
-- holder's lines of the room carry (or either names none), and the two Receive: lines are
-- within 30 s (the router sends both legs at once). A side that fits one holder, which no other
-- side fits alone, is that holder's. The rest pair with the holders left without one only when
-- every way reads the same (each finished, as many as those holders, each fitting
-- each: their lines then go with each such holder; a per-instance scope sees every deployment's
-- decode lines on a shared address); otherwise each is a request of its own (holder
-- `decode <host>`) and those holders' rows say so (d_unpaired): never completed by a guess.
-- A prefill instance's scope (08_instances.sql) hides the other prefills' lines: their sides of
-- its rooms come in as pdf_foreign_sides (unset outside a scope), so a decode side is placed in
-- the scope as in the whole file, never with the one prefill left in view by elimination.
foreign_sides AS MATERIALIZED (
    SELECT s.bootstrap_room, s.host, s.recv_t, s.addresses
    FROM (SELECT unnest(getvariable('pdf_foreign_sides')::STRUCT(bootstrap_room UBIGINT, host VARCHAR, recv_t BIGINT,
                                                                 addresses VARCHAR[])[]) AS s) AS f
    WHERE s.bootstrap_room IN (SELECT bootstrap_room FROM common_lines)
),
shared_rooms AS MATERIALIZED (
    SELECT bootstrap_room FROM common_lines
    GROUP BY bootstrap_room
    HAVING count(DISTINCT host) FILTER (WHERE engine = 'prefill') > 1
        OR count(DISTINCT host) FILTER (WHERE engine = 'decode') > 1
    UNION
    SELECT bootstrap_room FROM foreign_sides
),
room_sides AS MATERIALIZED (
    SELECT bootstrap_room, engine, host, engine || ' ' || host AS holder,
        bool_or(k IN (12, 14)) AS finished,
        min(t_us) FILTER (WHERE k IN (1, 11)) AS recv_t,
        count(DISTINCT bootstrap_host) AS n_addresses
    FROM common_lines
    WHERE engine IN ('prefill', 'decode') AND bootstrap_room IN (SELECT bootstrap_room FROM shared_rooms)
    GROUP BY ALL
    UNION ALL
    SELECT bootstrap_room, 'prefill' AS engine, host, 'prefill ' || host AS holder, false AS finished, recv_t,
        array_length(addresses) AS n_addresses
    FROM foreign_sides
),
side_addresses AS MATERIALIZED (
    SELECT DISTINCT bootstrap_room, engine, host, bootstrap_host AS address
    FROM common_lines
    WHERE engine IN ('prefill', 'decode') AND bootstrap_host IS NOT NULL
      AND bootstrap_room IN (SELECT bootstrap_room FROM shared_rooms)
    UNION
    SELECT bootstrap_room, 'prefill' AS engine, host, unnest(addresses) AS address FROM foreign_sides
),
fits AS MATERIALIZED (
    SELECT d.bootstrap_room, d.host, p.holder
    FROM room_sides AS d
    JOIN room_sides AS p ON p.bootstrap_room = d.bootstrap_room AND p.engine = 'prefill' AND d.engine = 'decode'
    LEFT JOIN (SELECT DISTINCT a.bootstrap_room, a.host AS d_host, b.host AS p_host
               FROM side_addresses AS a
               JOIN side_addresses AS b ON b.bootstrap_room = a.bootstrap_room AND b.address = a.address
               WHERE a.engine = 'decode' AND b.engine = 'prefill') AS shared_address
      ON shared_address.bootstrap_room = d.bootstrap_room AND shared_address.d_host = d.host
     AND shared_address.p_host = p.host
    WHERE (p.n_addresses = 0 OR d.n_addresses = 0 OR shared_address.p_host IS NOT NULL)
      AND (p.recv_t IS NULL OR d.recv_t IS NULL OR abs(p.recv_t - d.recv_t) <= 30000000)
),
placed_sides AS MATERIALIZED (
    -- placed: the one holder it fits, when no other side fits that holder alone
    SELECT d.bootstrap_room, d.host, d.finished,
        CASE WHEN n.n_fits = 1 AND sum(CASE WHEN n.n_fits = 1 THEN 1 ELSE 0 END) OVER (PARTITION BY d.bootstrap_room, n.holder) = 1
             THEN n.holder END AS placed
    FROM room_sides AS d
    LEFT JOIN (SELECT bootstrap_room, host, count(*) AS n_fits, min(holder) AS holder FROM fits GROUP BY ALL) AS n
      USING (bootstrap_room, host)
    WHERE d.engine = 'decode'
),
lone_holders AS MATERIALIZED (
    -- holders no decode side is placed with; `pairs`: the unplaced sides pair with them whichever way
    SELECT *, unplaced > 0 AND unplaced = unplaced_finished AND unplaced = lone AND fitting = lone * unplaced AS pairs
    FROM (
        SELECT s.bootstrap_room, s.holder, coalesce(p.unplaced, 0) AS unplaced,
            coalesce(p.unplaced_finished, 0) AS unplaced_finished,
            count(*) OVER (PARTITION BY s.bootstrap_room) AS lone,
            sum(coalesce(fu.n, 0)) OVER (PARTITION BY s.bootstrap_room) AS fitting
        FROM room_sides AS s
        LEFT JOIN (SELECT f.bootstrap_room, f.holder, count(*) AS n
                   FROM fits AS f JOIN placed_sides AS u USING (bootstrap_room, host)
                   WHERE u.placed IS NULL GROUP BY ALL) AS fu
          ON fu.bootstrap_room = s.bootstrap_room AND fu.holder = s.holder
        LEFT JOIN (SELECT bootstrap_room, count(*) FILTER (WHERE placed IS NULL) AS unplaced,
                          count(*) FILTER (WHERE placed IS NULL AND finished) AS unplaced_finished
                   FROM placed_sides GROUP BY bootstrap_room) AS p ON p.bootstrap_room = s.bootstrap_room
        LEFT JOIN (SELECT DISTINCT bootstrap_room, placed FROM placed_sides WHERE placed IS NOT NULL) AS pl
          ON pl.bootstrap_room = s.bootstrap_room AND pl.placed = s.holder
        WHERE s.engine = 'prefill' AND pl.placed IS NULL
    )
),
decode_holders AS MATERIALIZED (
    -- the holder(s) each decode side of a shared room is judged with
    SELECT d.bootstrap_room, d.host, coalesce(d.placed, l.holder, 'decode ' || d.host) AS holder
    FROM placed_sides AS d
    LEFT JOIN lone_holders AS l ON d.placed IS NULL AND l.bootstrap_room = d.bootstrap_room AND l.pairs
),
pooled AS (
    SELECT bootstrap_room, holder, pairs, unplaced FROM lone_holders WHERE unplaced > 0
),
-- whose request each engine host's lines of a shared room are (a decode side paired whichever
-- way: each such holder's)
line_holders AS MATERIALIZED (
    SELECT bootstrap_room, engine, host, holder FROM room_sides WHERE engine = 'prefill'
    UNION ALL
    SELECT bootstrap_room, 'decode' AS engine, host, holder FROM decode_holders
),
-- each room line with the holder whose request it is ('' for a room that is one request; a line
-- of a shared room that no engine side holds, a router's: '?')
common AS (
    SELECT c.*, '' AS holder FROM common_lines AS c WHERE c.bootstrap_room NOT IN (SELECT bootstrap_room FROM shared_rooms)
    UNION ALL
    SELECT c.*, coalesce(h.holder, '?') AS holder
    FROM common_lines AS c
    LEFT JOIN line_holders AS h ON h.bootstrap_room = c.bootstrap_room AND h.engine = c.engine AND h.host = c.host
    WHERE c.bootstrap_room IN (SELECT bootstrap_room FROM shared_rooms)
),
aggregated AS (
    -- each aggregate touches only the lines its FILTER selects: with ~4 lines per request, the
    -- fewer touched, the faster (first/last and the level are derived below instead)
    SELECT
        bootstrap_room, holder,
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
    GROUP BY bootstrap_room, holder
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
rare_held AS (
    -- each with its holder, as the common lines
    SELECT x.*, '' AS holder FROM rare_lines AS x WHERE x.bootstrap_room NOT IN (SELECT bootstrap_room FROM shared_rooms)
    UNION ALL
    SELECT x.*, coalesce(h.holder, '?') AS holder
    FROM rare_lines AS x
    LEFT JOIN line_holders AS h ON h.bootstrap_room = x.bootstrap_room AND h.engine = x.engine AND h.host = x.host
    WHERE x.bootstrap_room IN (SELECT bootstrap_room FROM shared_rooms)
),
rare AS (
    SELECT
        bootstrap_room, holder,
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
    FROM rare_held
    GROUP BY bootstrap_room, holder
)
SELECT
    coalesce(f.bootstrap_room, r.bootstrap_room) AS bootstrap_room,
    coalesce(f.holder, r.holder) AS holder,
    -- a holder of a shared room whose decode side no line places (see shared_rooms)
    coalesce(NOT u.pairs, false) AS d_unpaired,
    coalesce(f.p_host_c, r.p_host_r) AS p_host,
    coalesce(f.prefill_rid_c, r.prefill_rid_r) AS prefill_rid,
    least(f.p_recv, f.p_done, f.p_stats_at, r.p_first_r) AS p_first,
    greatest(f.p_last_c, r.p_last_r) AS p_last,
    f.p_recv, f.p_done, f.p_stats_at, f.p_inflight_entry, f.p_bootstrap_done,
    CASE WHEN NOT coalesce(u.pairs AND u.unplaced > 1, false) THEN coalesce(f.d_host_c, r.d_host_r) END AS d_host,
    -- paired whichever way: no one decode side (or host, when they differ) is its own
    CASE WHEN NOT coalesce(u.pairs, false) THEN coalesce(f.decode_rid_c, r.decode_rid_r) END AS decode_rid,
    least(f.d_recv, f.d_done, f.d_stats_at, r.d_first_r) AS d_first,
    greatest(f.d_last_c, r.d_last_r) AS d_last,
    f.d_recv, f.d_done, f.d_stats_at,
    -- legs: Receive: lines on each side (a DeepSeek-V4 rebootstrap sends the room to the prefill
    -- again with the decode's rid; n > 1 and duplicate rooms share one), at least one per side seen
    greatest(coalesce(f.p_recvs, 0), CASE WHEN coalesce(f.p_host_c, r.p_host_r) IS NOT NULL OR f.p_done IS NOT NULL
                                          OR r.p_first_r IS NOT NULL THEN 1 ELSE 0 END)
      + greatest(coalesce(f.d_recvs, 0), CASE WHEN coalesce(f.d_host_c, r.d_host_r) IS NOT NULL OR f.d_done IS NOT NULL
                                              OR r.d_first_r IS NOT NULL THEN 1 ELSE 0 END) AS legs,
    f.p_last_recv,
    -- a later prefill leg is open: its Receive: came after every prefill end line
    coalesce(f.p_last_recv > greatest(f.p_last_done, r.p_last_end_r), false) AS p_reopened,
    r.* EXCLUDE (bootstrap_room, holder, debug_lines, p_last_end_r, p_any_abort, p_any_failure, p_any_propagated,
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
FULL JOIN rare AS r ON r.bootstrap_room = f.bootstrap_room AND r.holder = f.holder
LEFT JOIN pooled AS u ON u.bootstrap_room = coalesce(f.bootstrap_room, r.bootstrap_room) AND u.holder = coalesce(f.holder, r.holder)
-- lines of a shared room placed with no holder are not a request of their own; in a prefill
-- instance's scope, the decode sides placed with another prefill are that prefill's
WHERE coalesce(f.holder, r.holder) <> '?'
  AND coalesce(f.holder, r.holder) NOT IN (SELECT 'prefill ' || host FROM foreign_sides);
