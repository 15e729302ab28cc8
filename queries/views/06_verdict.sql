-- The window's verdict, as one row (design.md §3), first match wins:
--   watchdog_missed  something was stuck past timeout+grace with no watchdog line: silent pins, or
--                    anonymous pins in the gauge (proven pins win over holes elsewhere)
--   inconclusive     the window is shorter than the timeout; no line in the window; a prefill whose
--                    inflight queue was never observed; a decisive hole (see `coverage`); an
--                    undecided request; a floor that no later sample resolves
--   watchdog_fired   stuck requests existed and the watchdog released every one of them
--   nothing_stuck    none of the above: every prefill's queues were observed through the window
--                    (no silence an open request or a non-zero floor could hide in), nothing stayed
--                    past the timeout, the floor drained, and no hole could hide a request's end
-- Along with it, as lists (unnested by the views in 07_findings.sql): coverage (holes and whether
-- they decide), anonymous_pins (per prefill host), abort_storms, reason_rows.
CREATE OR REPLACE VIEW verdict AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
-- the columns of `requests` the verdict, its list of requests not completed and the watchdog's
-- firings read: the verdict is computed from one pass over `requests`
rq AS MATERIALIZED (
    -- a request is (deployment, room): key tells two deployments' requests with one room apart
    SELECT bootstrap_room, concat_ws('@', bootstrap_room::VARCHAR, deployment) AS key, deployment,
        room, class, prefill_status, holder_at_end, p_host, might_be_stuck, first_t, last_t,
        hole_ids, dwell_s, dwell_basis, abort_race, across_restart, aborted_t, abort_race_outcome, undecided_reason,
        watchdog_fired_t, wd_dwell_s, wd_same_second, wd_n_ranks, wd_timeout_s, prefill_received_t, prefill_end_t,
        prefill_rid, decode_rid, one_sided, evidence_level, lost_reason, reason, wd_state, wd_ranks, d_host, legs,
        decode_end_t, decode_received_t, decode_unpaired, released_by_t
    FROM requests
),
-- holes of the context before the window count only where they bear on a request judged in it
holes AS MATERIALIZED (
    SELECT h.* FROM (SELECT unnest(holes, recursive := true) FROM c) AS h, c
    WHERE h.to_t >= c.start_t
       OR h.hole_id IN (SELECT unnest(hole_ids) FROM rq WHERE prefill_status = 'hidden')
),
observed AS MATERIALIZED (SELECT unnest(observed, recursive := true) FROM c),
gauge AS MATERIALIZED (SELECT unnest(host_gauge, recursive := true) FROM c),
restarts AS MATERIALIZED (
    SELECT x.* FROM (SELECT unnest(engine_restarts, recursive := true) FROM c) AS x, c
    WHERE coalesce(x.up_t, c.end_t) >= c.start_t
),
engines AS MATERIALIZED (SELECT unnest(engine_coverage, recursive := true) FROM c),
tp AS (SELECT unnest(prefill_tp_ranks, recursive := true) FROM c),
ig AS MATERIALIZED (SELECT host, dp_rank, tp_rank, incarnation, t_us, floor, inflight_req FROM inflight_gauge),
-- the metrics' views, each planned once
metric_only AS MATERIALIZED (SELECT * FROM metric_only_prefills),
metric_scrapes AS MATERIALIZED (SELECT host, series, t_us, step_us FROM metric_inflight),

counts AS MATERIALIZED (
    -- a few groups first, then their sums: one aggregate over every request instead of twelve
    SELECT
        coalesce(sum(n) FILTER (WHERE class = 'watchdog_fired'), 0)::BIGINT AS watchdog_fired,
        coalesce(sum(n) FILTER (WHERE class = 'silent_pin'), 0)::BIGINT AS silent_pin,
        coalesce(sum(n) FILTER (WHERE class = 'silent_pin' AND prefill_status = 'pinned'), 0)::BIGINT AS proven_pins,
        coalesce(sum(n) FILTER (WHERE class = 'transfer_failed'), 0)::BIGINT AS transfer_failed,
        coalesce(sum(n) FILTER (WHERE class = 'aborted'), 0)::BIGINT AS aborted,
        coalesce(sum(n) FILTER (WHERE class = 'retracted'), 0)::BIGINT AS retracted,
        coalesce(sum(n) FILTER (WHERE class = 'lost'), 0)::BIGINT AS lost,
        coalesce(sum(n) FILTER (WHERE class = 'completed'), 0)::BIGINT AS completed,
        coalesce(sum(n) FILTER (WHERE class = 'in_flight'), 0)::BIGINT AS in_flight,
        coalesce(sum(n) FILTER (WHERE class = 'undecided'), 0)::BIGINT AS undecided,
        coalesce(sum(n) FILTER (WHERE abort_race), 0)::BIGINT AS abort_races,
        coalesce(sum(n) FILTER (WHERE across_restart), 0)::BIGINT AS across_restart,
        coalesce(sum(n), 0)::BIGINT AS requests
    FROM (SELECT class, prefill_status, abort_race, across_restart, count(*) AS n FROM rq GROUP BY ALL)
),

-- ------------------------------------------------------------------------ anonymous pins
-- At L0 (no per-request lines) a pinned request shows only as a floor of #inflight-req - #new-seq
-- that never returns to 0 across later `Prefill batch` lines. Requests the lines do name (silent
-- pins, undecided ones) are subtracted; the rest are anonymous pins.
--   anonymous_pins  floor held longer than timeout+grace (the watchdog should have fired)
--   unresolved      where no request log names the requests: the final floor is a full timeout
--                   old by the stream's end (window end or the prefill's restart), but no later
--                   batch line shows whether it drained
named AS (
    SELECT p_host AS host,
        count(*) FILTER (WHERE class = 'silent_pin' OR prefill_status IN ('hidden', 'waiting_queue', 'unnamed')) AS named_old,
        count(*) FILTER (WHERE holder_at_end = 'prefill') AS named_open
    FROM rq
    WHERE p_host IS NOT NULL
      -- only those counted: a host with none is a host with zeros (joined with coalesce below)
      AND (class = 'silent_pin' OR prefill_status IN ('hidden', 'waiting_queue', 'unnamed') OR holder_at_end = 'prefill')
    GROUP BY p_host
),
per_host AS (
    SELECT g.host,
        sum(g.pinned_floor)::BIGINT AS pinned_floor, min(g.pinned_since) AS pinned_since,
        sum(g.open_floor)::BIGINT AS open_floor, min(g.open_since) AS open_since,
        max(g.last_t) AS last_sample_t, sum(g.samples)::BIGINT AS samples,
        bool_or(g.open_floor > 0 AND g.stream_end_t - g.open_since > c.stuck_us) AS open_old
    FROM gauge AS g CROSS JOIN c
    GROUP BY g.host, c.stuck_us
),
host_level AS (
    SELECT host, max(evidence_level) AS evidence_level FROM engines WHERE engine = 'prefill' GROUP BY host
),
-- L1+ (requests logged): the request log bounds the unnamed. Every request that entered the prefill
-- in the window is named by its Receive:, every one that left by its terminal line (Finish:, a
-- failure, the watchdog), so an unnamed request was held since before the prefill's first line
-- and never left. named_open(t) counts the named requests the prefill may hold at a batch line
-- t: Receive: at or before it (a request with a terminal line and no Receive: from its
-- incarnation's start), no terminal line before it. Same-time lines count as held (1-s prefixes
-- tie a whole second: the order within it is not taken from the file), and Receive: / Finish:
-- bracket the scheduler's hold, so named_open(t) is at least the named requests in the inflight
-- queue and floor(t) - named_open(t) at most the unnamed ones in it. Those stay there to the
-- stream's end (an unnamed request never leaves), so each sample of the stretch proves
-- floor - named_open anonymous pins, and the most any sample proves is what is claimed (never
-- more than the gauge's pinned_floor - named pins). A busy queue whose every request is named
-- proves none, however high its floor. TP ranks report one queue (the most any proves), DP
-- ranks and incarnations add up. named_open is a sort-merge per prefill host and incarnation: a
-- running sum of +1 entries / -1 exits over the samples, by t_us (requests' prefill_received_t /
-- prefill_end_t and the samples are lines of the same host, moved by the same offset).
-- Not applied on a host with a hole on its prefill (a Receive: lost in it would leave a request
-- unnamed): there the gauge bound stands, reported as an upper bound.
refine_hosts AS MATERIALIZED (
    SELECT a.host
    FROM per_host AS a JOIN host_level AS e USING (host)
    WHERE a.pinned_floor > 0 AND e.evidence_level >= 'L1'
      -- the request log switched on or off at run time: it does not name every request
      AND NOT EXISTS (SELECT 1 FROM (SELECT unnest(logging_changes, recursive := true) FROM c) AS lc
                      WHERE lc.host = a.host AND lc.log_requests IS NOT NULL)
      AND NOT EXISTS (
          SELECT 1 FROM holes AS x
          WHERE x.engine = 'prefill' AND x.kind <> 'engine_down' AND (x.host = a.host OR x.host = ''))
),
pinc AS (
    SELECT x.host, x.incarnation, x.start_t, lead(x.start_t) OVER (PARTITION BY x.host ORDER BY x.start_t) AS next_t
    FROM (SELECT unnest(incarnations, recursive := true) FROM c) AS x
    WHERE x.engine = 'prefill'
),
stretch AS MATERIALIZED (
    -- per stream, where the stretch pinned_floor is taken from begins: its last sample a full
    -- timeout+grace before the stream's last one
    -- (a join to each stream's last sample: a window partitioned without an order is far slower)
    SELECT s.host, s.incarnation, s.dp_rank, s.tp_rank, max(s.t_us) FILTER (WHERE s.t_us <= l.last_t - c.stuck_us) AS t0
    FROM ig AS s
    JOIN (SELECT host, incarnation, dp_rank, tp_rank, max(t_us) AS last_t FROM ig
          WHERE host IN (SELECT host FROM refine_hosts) GROUP BY ALL) AS l
      USING (host, incarnation, dp_rank, tp_rank)
    CROSS JOIN c
    GROUP BY ALL
),
placed AS MATERIALIZED (
    -- the requests the prefill may still have held in a stretch: their Receive: and first prefill
    -- terminal line (Finish:, a failure, the watchdog), each in the incarnation it was logged in
    -- (a restart empties the queue); the many that left before every stretch began cannot count
    -- A request named by other lines only (neither Receive: nor an end) counts as held from the
    -- start of the incarnation of its first line to the stream's end.
    SELECT r.p_host AS host, r.prefill_received_t AS enter_t, r.prefill_end_t AS leave_t,
        coalesce(i_in.incarnation, 1) AS inc_in, coalesce(i_out.incarnation, 1) AS inc_out
    FROM rq AS r
    JOIN (SELECT host, min(t0) AS t_lo FROM stretch GROUP BY host) AS h
      ON h.host = r.p_host AND coalesce(r.prefill_end_t, 9223372036854775807) >= h.t_lo
    LEFT JOIN pinc AS i_in ON i_in.host = r.p_host AND r.prefill_received_t >= i_in.start_t
     AND (i_in.next_t IS NULL OR r.prefill_received_t < i_in.next_t)
    LEFT JOIN pinc AS i_out ON i_out.host = r.p_host AND coalesce(r.prefill_end_t, r.first_t) >= i_out.start_t
     AND (i_out.next_t IS NULL OR coalesce(r.prefill_end_t, r.first_t) < i_out.next_t)
),
merged AS (
    -- ord breaks ties of equal times: entries, then samples, then exits (held when unsure)
    SELECT host, inc_in AS incarnation, enter_t AS t_us, 0 AS ord, 1 AS delta,
        NULL::BIGINT AS floor, NULL::INTEGER AS dp_rank, NULL::INTEGER AS tp_rank
    FROM placed WHERE enter_t IS NOT NULL
    UNION ALL
    SELECT host, inc_out, -9223372036854775807, 0, 1, NULL, NULL, NULL
    FROM placed WHERE enter_t IS NULL OR (leave_t IS NOT NULL AND inc_in <> inc_out)
    UNION ALL
    SELECT host, inc_out, leave_t, 2, -1, NULL, NULL, NULL
    FROM placed WHERE leave_t IS NOT NULL
    UNION ALL
    SELECT s.host, s.incarnation, s.t_us, 1, 0, s.floor, s.dp_rank, s.tp_rank
    FROM ig AS s
    JOIN stretch AS st USING (host, incarnation, dp_rank, tp_rank)
    WHERE s.t_us >= st.t0
),
stream_proof AS (
    -- floor - named_open at each sample of the stretch; the most any proves, per stream
    SELECT host, incarnation, dp_rank, tp_rank, greatest(max(floor - named_open), 0) AS proven
    FROM (
        SELECT *, sum(delta) OVER (PARTITION BY host, incarnation ORDER BY t_us, ord ROWS UNBOUNDED PRECEDING) AS named_open
        FROM merged
    )
    WHERE ord = 1
    GROUP BY ALL
),
host_bound AS (
    SELECT host, sum(proven)::BIGINT AS bound
    FROM (SELECT host, incarnation, dp_rank, max(proven) AS proven FROM stream_proof GROUP BY ALL)
    GROUP BY host
),
anon_x AS MATERIALIZED (
    SELECT
        h.host, h.samples, h.last_sample_t, h.pinned_floor, h.pinned_since,
        greatest(least(h.pinned_floor - coalesce(n.named_old, 0), coalesce(hb.bound, h.pinned_floor)), 0)::BIGINT
            AS anonymous_pins,
        h.open_floor, h.open_since,
        coalesce(e.evidence_level >= 'L1', false) AS requests_logged,
        h.open_old AND NOT coalesce(e.evidence_level >= 'L1', false)
            AND h.open_floor + h.pinned_floor > coalesce(n.named_open, 0) AS unresolved,
        hb.bound IS NOT NULL AS bounded_by_names,
        greatest(h.pinned_floor - coalesce(n.named_old, 0), 0)::BIGINT AS gauge_pins,
        coalesce(n.named_open, 0) AS named_open
    FROM per_host AS h
    LEFT JOIN named AS n USING (host)
    LEFT JOIN host_level AS e USING (host)
    LEFT JOIN host_bound AS hb USING (host)
),
anon AS MATERIALIZED (
    SELECT * EXCLUDE (bounded_by_names, gauge_pins) FROM anon_x
),
anon_rows AS (SELECT * EXCLUDE (named_open) FROM anon),

-- ------------------------------------------------------------------------------ coverage
-- A hole decides (makes the verdict inconclusive) when it overlaps a request that might be stuck
-- (or an L0 floor not yet judged) and no prefill evidence covers a full timeout+grace after it;
-- or when a request's end may be hidden in it. A window shorter than the timeout always decides.
suspects AS (
    SELECT key, room, p_host, first_t, last_t FROM rq
    WHERE might_be_stuck AND prefill_status IN ('young', 'hidden', 'waiting_queue', 'no_prefill')
),
hole_rooms AS (
    -- requests a hole overlaps while they might be stuck, and those whose end it may hide
    SELECT h.hole_id, su.key, su.room, su.first_t
    FROM holes AS h JOIN suspects AS su
      ON h.from_t <= su.last_t AND h.to_t >= su.first_t
     AND (h.engine IS DISTINCT FROM 'prefill' OR h.host = '' OR su.p_host IS NULL OR h.host = su.p_host)
    UNION
    SELECT hole_id, key, room, first_t
    FROM (SELECT unnest(hole_ids) AS hole_id, key, room, first_t FROM rq WHERE prefill_status = 'hidden')
),
hit AS (
    SELECT hole_id, count(DISTINCT key) AS n, list(room ORDER BY first_t, room)[1:5] AS rooms,
        count(DISTINCT key) FILTER (WHERE key IN (SELECT key FROM rq WHERE prefill_status = 'hidden')) AS n_hidden
    FROM hole_rooms GROUP BY hole_id
),
floors AS (
    -- a hole after a non-zero floor began that the requests the lines name do not account for:
    -- the floor may have drained, or stayed, in it
    SELECT h.hole_id
    FROM holes AS h JOIN anon AS a
      ON a.open_floor > 0 AND (NOT a.requests_logged OR a.open_floor + a.pinned_floor > a.named_open)
     AND h.to_t >= a.open_since AND (h.engine IS DISTINCT FROM 'prefill' OR h.host = '' OR h.host = a.host)
    GROUP BY h.hole_id
    UNION
    -- a hole in an L0 prefill's lines (no line names its requests): a request that entered it in
    -- the hole and stayed shows only as a floor after it, so nothing but later samples (covered)
    -- rule out a pin born there; a prefill that is down holds no request, so its downtime is none
    SELECT h.hole_id
    FROM holes AS h JOIN anon AS a
      ON NOT a.requests_logged AND h.kind <> 'engine_down' AND h.engine = 'prefill'
     AND (h.host = '' OR h.host = a.host)
),
coverage AS MATERIALIZED (
    SELECT
        h.hole_id, h.kind, h.host, h.engine, h.unit, h.from_t, h.to_t, h.n, h.detail, h.covered,
        coalesce(hit.n, 0) AS suspects,
        coalesce(hit.rooms, []) AS suspect_rooms,
        fl.hole_id IS NOT NULL AS overlaps_open_floor,
        (NOT h.covered AND (coalesce(hit.n, 0) > 0 OR fl.hole_id IS NOT NULL)) OR coalesce(hit.n_hidden, 0) > 0
            -- the prefill ran batches whose lines never showed its inflight queue (design.md,
            -- "Observed"): what entered it there is not observed, named or not
            OR (h.kind = 'prefill_silent' AND coalesce(h.n, 0) > 0 AND NOT h.covered) AS decisive
    FROM holes AS h
    LEFT JOIN hit USING (hole_id)
    LEFT JOIN floors AS fl USING (hole_id)
    UNION ALL
    SELECT NULL, 'short_window', NULL, NULL, NULL, c.start_t, c.end_t, NULL,
        format('the window is {:.0f} s, shorter than the watchdog timeout ({} s)', (c.end_t - c.start_t) / 1e6, c.timeout_s),
        false, 0, [], false, true
    FROM c WHERE c.end_t - c.start_t < c.timeout_us
),

-- ---------------------------------------------------------------------------- abort storms
-- Many aborts within seconds (>= pdf_storm_min_aborts, gaps <= pdf_storm_gap_s), judged as the
-- operator would: did the inflight floor stay bounded and drain back to where it was before the
-- storm, and did decode keep generating afterwards?
aborts AS (
    SELECT bootstrap_room, aborted_t AS t, class, abort_race_outcome FROM rq
    WHERE aborted_t >= (SELECT start_t FROM c)
),
storm_no AS (
    SELECT *, sum(new_storm) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING) AS storm
    FROM (SELECT a.*, CASE WHEN a.t - lag(a.t) OVER (ORDER BY a.t) <= c.storm_gap_us THEN 0 ELSE 1 END AS new_storm
          FROM aborts AS a CROSS JOIN c)
),
storms AS MATERIALIZED (
    SELECT storm, min(t) AS from_t, max(t) AS to_t, count(*) AS aborts,
        count(*) FILTER (WHERE class = 'silent_pin') AS pinned,
        count(*) FILTER (WHERE abort_race_outcome = 'released') AS released_races,
        count(*) FILTER (WHERE abort_race_outcome IN ('pinned', 'open')) AS open_races
    FROM storm_no GROUP BY storm
    HAVING count(*) >= any_value((SELECT storm_min_aborts FROM c))
),
before AS (
    SELECT st.storm, arg_max(g.floor, g.t_us) AS base_floor
    FROM storms AS st JOIN ig AS g ON g.t_us < st.from_t GROUP BY st.storm
),
during AS (
    SELECT st.storm, max(g.inflight_req) AS peak_inflight, max(g.floor) AS peak_floor
    FROM storms AS st CROSS JOIN c
    JOIN ig AS g ON g.t_us >= st.from_t AND g.t_us <= st.to_t + c.stuck_us
    GROUP BY st.storm
),
after AS (
    SELECT st.storm, count(*) AS samples_after,
        min(g.t_us) FILTER (WHERE g.floor <= coalesce(b.base_floor, 0)) AS drained_t,
        arg_max(g.floor, g.t_us) AS final_floor
    FROM storms AS st LEFT JOIN before AS b USING (storm)
    JOIN ig AS g ON g.t_us > st.to_t
    GROUP BY st.storm
),
decode_activity AS (
    SELECT e.ts_us - o.offset_us AS t_us
    FROM events AS e
    JOIN (SELECT unnest(host_offsets, recursive := true) FROM c) AS o
      ON o.host = coalesce(e.host, '') AND e.ts_us >= o.lo_us AND e.ts_us <= o.hi_us
    WHERE e.engine = 'decode'
      AND ((e.event = 'decode_stats' AND (coalesce(e.gen_throughput, 0) > 0 OR coalesce(e.running_req, 0) > 0))
        OR (e.event = 'request_finished' AND coalesce(e.finish_type, '') <> 'abort'))
),
decode_after AS (
    SELECT st.storm, min(d.t_us) AS decode_generating_t
    FROM storms AS st JOIN decode_activity AS d ON d.t_us > st.to_t GROUP BY st.storm
),
storm_rows AS MATERIALIZED (
    SELECT
        st.storm, st.from_t, st.to_t, (st.to_t - st.from_t) / 1e6 AS duration_s, st.aborts,
        st.released_races, st.open_races, st.pinned,
        b.base_floor, d.peak_inflight, d.peak_floor, af.samples_after, af.drained_t, af.final_floor,
        da.decode_generating_t,
        CASE
            WHEN st.pinned > 0 THEN 'left pins'
            WHEN af.samples_after IS NULL OR af.samples_after = 0 THEN 'undetermined: no prefill batch line after it'
            WHEN af.drained_t IS NULL THEN 'the inflight floor did not drain back'
            WHEN da.decode_generating_t IS NULL THEN 'drained, but decode showed no generation after it'
            ELSE 'clean: the inflight floor drained back and decode kept generating'
        END AS judgement
    FROM storms AS st
    LEFT JOIN before AS b USING (storm)
    LEFT JOIN during AS d USING (storm)
    LEFT JOIN after AS af USING (storm)
    LEFT JOIN decode_after AS da USING (storm)
),

-- ------------------------------------------------------------------------ the watchdog's firings
-- Each firing with the decode's load at that moment (its last batch line before the firing,
-- within 30 s; the next one says whether the backlog was draining): a timeout fires on a healthy
-- but saturated decode too. Saturated: token usage >= 0.95, or prealloc + transfer queues of 4 or
-- more that were not shrinking.
dload AS MATERIALIZED (
    SELECT coalesce(e.host, '') AS host, e.ts_us - o.offset_us AS t_us, e.running_req, e.prealloc_req, e.transfer_req,
        coalesce(e.token_usage, e.full_token_usage) AS token_usage,
        coalesce(e.prealloc_req, 0) + coalesce(e.transfer_req, 0) AS backlog
    FROM events AS e
    JOIN (SELECT unnest(host_offsets, recursive := true) FROM c) AS o
      ON o.host = coalesce(e.host, '') AND e.ts_us >= o.lo_us AND e.ts_us <= o.hi_us
    WHERE e.event = 'decode_stats' AND e.engine = 'decode'
),
fired_rq AS MATERIALIZED (
    -- with one decode, a firing's decode is that one even when no decode line names the room
    SELECT r.*, coalesce(r.d_host, CASE WHEN (SELECT count(DISTINCT host) FROM dload) = 1 THEN (SELECT min(host) FROM dload) END)
        AS d_host_eff
    FROM rq AS r WHERE r.watchdog_fired_t IS NOT NULL
),
fire_load AS MATERIALIZED (
    SELECT f.key,
        CASE WHEN b.t_us >= f.watchdog_fired_t - 30000000 THEN b.t_us END AS load_t,
        CASE WHEN b.t_us >= f.watchdog_fired_t - 30000000 THEN b.running_req END AS decode_running_req,
        CASE WHEN b.t_us >= f.watchdog_fired_t - 30000000 THEN b.prealloc_req END AS decode_prealloc_req,
        CASE WHEN b.t_us >= f.watchdog_fired_t - 30000000 THEN b.transfer_req END AS decode_transfer_req,
        CASE WHEN b.t_us >= f.watchdog_fired_t - 30000000 THEN b.token_usage END AS decode_token_usage,
        CASE WHEN b.t_us >= f.watchdog_fired_t - 30000000
             THEN coalesce(b.token_usage >= 0.95, false) OR (b.backlog >= 4 AND coalesce(a.backlog, b.backlog) >= b.backlog)
        END AS backpressure
    FROM fired_rq AS f
    ASOF LEFT JOIN dload AS b ON b.host = f.d_host_eff AND b.t_us <= f.watchdog_fired_t
    ASOF LEFT JOIN dload AS a ON a.host = f.d_host_eff AND a.t_us > f.watchdog_fired_t
),
firings AS (
    SELECT
        r.bootstrap_room, r.room, r.prefill_rid AS rid, r.p_host AS host, r.watchdog_fired_t AS fired_t,
        r.wd_dwell_s AS dwell_s, r.wd_state AS state, coalesce(r.wd_timeout_s, c.timeout_s) AS timeout_s,
        r.wd_ranks AS ranks, r.wd_n_ranks AS n_ranks, tp.tp_ranks AS host_tp_ranks,
        r.wd_n_ranks >= coalesce(tp.tp_ranks, 0) AS all_ranks,
        r.wd_same_second AS same_second,
        r.wd_dwell_s > coalesce(r.wd_timeout_s, c.timeout_s) + c.grace_s AS late,
        r.across_restart,
        r.d_host_eff AS decode_host, fl.backpressure, fl.decode_running_req, fl.decode_prealloc_req,
        fl.decode_transfer_req, fl.decode_token_usage
    FROM fired_rq AS r
    CROSS JOIN c
    LEFT JOIN tp ON tp.host = r.p_host
    LEFT JOIN fire_load AS fl USING (key)
),
-- Did the deployment recover? Per prefill -> decode path that fired:
--   wedged        nothing completed on the path after its first firing, and the firings went on
--                 (a later firing) or later rooms on the path are stuck again (fired, pinned,
--                 undecided): on NIXL one stuck handle blocks every later room to that decode
--   drained       after the last firing the prefill's floor was seen at 0 and a request on the
--                 path completed
--   undetermined  neither can be shown (no traffic on the path after the last firing, say)
fire_paths AS MATERIALIZED (
    SELECT p_host, d_host_eff, min(watchdog_fired_t) AS first_fire_t, max(watchdog_fired_t) AS last_fire_t,
        count(*) AS firings
    FROM fired_rq GROUP BY ALL
),
path_after AS (
    SELECT f.p_host, f.d_host_eff, any_value(f.first_fire_t) AS first_fire_t, any_value(f.last_fire_t) AS last_fire_t,
        any_value(f.firings) AS firings,
        count(r.bootstrap_room) FILTER (WHERE r.class = 'completed' AND r.last_t > f.first_fire_t) AS completed_after_first,
        count(r.bootstrap_room) FILTER (WHERE r.class = 'completed' AND r.last_t > f.last_fire_t) AS completed_after_last,
        count(r.bootstrap_room) FILTER (WHERE r.first_t > f.first_fire_t AND r.class IN ('watchdog_fired', 'silent_pin', 'undecided'))
            AS stuck_after_first
    FROM fire_paths AS f
    LEFT JOIN rq AS r ON r.p_host IS NOT DISTINCT FROM f.p_host
     AND coalesce(r.d_host, f.d_host_eff) IS NOT DISTINCT FROM f.d_host_eff
    GROUP BY f.p_host, f.d_host_eff
),
recovery_rows AS MATERIALIZED (
    SELECT pa.*, g.last_zero_t,
        CASE
            WHEN pa.completed_after_first = 0 AND (pa.stuck_after_first > 0 OR pa.last_fire_t > pa.first_fire_t + 1000000)
                THEN 'wedged'
            WHEN g.last_zero_t > pa.last_fire_t AND pa.completed_after_last > 0 THEN 'drained'
            ELSE 'undetermined'
        END AS recovery
    FROM path_after AS pa
    LEFT JOIN (SELECT host, max(last_zero_t) AS last_zero_t FROM gauge GROUP BY host) AS g ON g.host = pa.p_host
),
recovery AS (
    SELECT CASE WHEN count(*) = 0 THEN NULL
                WHEN bool_or(recovery = 'wedged') THEN 'wedged'
                WHEN bool_and(recovery = 'drained') THEN 'drained'
                ELSE 'undetermined' END AS recovery
    FROM recovery_rows
),
-- ------------------------------------------------------------------ stuck outside the watchdog
-- A frozen queue (context: a floor frozen past timeout + grace) the requests the lines name do not
-- account for: a request held on that side through the whole stretch and judged by its own lines
-- (a silent pin, a watchdog firing the decode was never told of on NIXL, SGLang's own bootstrap
-- timeout that ended it, even a slow completion) explains one; what is left over, or held by
-- requests still open at the window end with nothing else said, is stuck where the inflight
-- watchdog cannot see it.
frozen_rows AS MATERIALIZED (
    -- explained: at every sample of the stretch, the named requests the queue's engine held then
    -- (received, not yet ended on that side; one the watchdog released on the prefill may still sit
    -- in the decode's transfer queue) — the fewest over its samples. Overlapping holds add up: two
    -- hung sends, one after the other, explain a queue that never drained between them.
    SELECT f.* EXCLUDE (sample_ts), coalesce(x.n, 0) AS explained
    FROM (SELECT unnest(frozen_queues, recursive := true) FROM c) AS f
    LEFT JOIN LATERAL (
        SELECT min(k.n) AS n FROM (
            SELECT t.t_us, count(r.bootstrap_room) AS n
            FROM (SELECT unnest(f.sample_ts) AS t_us) AS t
            LEFT JOIN rq AS r
              -- a lost request (its prefill hold ended unseen, the decode never finished it) is
              -- judged by nothing: still in the decode's queue, it is what is stuck there
              ON r.class NOT IN ('in_flight', 'lost')
             AND CASE WHEN f.engine = 'decode'
                      THEN coalesce(r.d_host, f.host) = f.host
                           AND coalesce(r.decode_received_t, r.first_t) <= t.t_us + 1000000
                           AND coalesce(r.decode_end_t >= t.t_us - 1000000, true)
                      ELSE r.p_host = f.host
                           AND coalesce(r.prefill_received_t, r.first_t) <= t.t_us + 1000000
                           AND coalesce(r.prefill_end_t >= t.t_us - 1000000, true) END
            GROUP BY t.t_us
        ) AS k
    ) AS x ON true
),
stuck_rows AS MATERIALIZED (
    SELECT f.* EXCLUDE (explained)
    FROM frozen_rows AS f, (SELECT fleet_stuck_queues FROM params) AS p
    WHERE f.value > f.explained
      -- one instance of a fleet: another engine's queue (a decode serves several prefills) holds
      -- requests of other instances its scope does not see; charged to it only when the whole
      -- window, which sees them all, could not explain the queue either
      AND (p.fleet_stuck_queues IS NULL OR f.engine = 'prefill'
           OR list_contains(string_split(p.fleet_stuck_queues, ';'), concat_ws('|', f.host, f.engine, f.queue)))
),
-- ------------------------------------------------------------------------------- window
-- Prefills whose inflight queue the window never showed: no #inflight-req sample and no request
-- line (a decode-only export, a non-PD log, a prefill that only started); and a window with no
-- line at all (a window after the data, or before it).
unobserved AS (
    SELECT h.host FROM (SELECT unnest(prefill_hosts) AS host FROM c) AS h
    LEFT JOIN observed AS o ON o.host = h.host AND o.engine = 'prefill'
    WHERE coalesce(o.inflight, 0) = 0 AND coalesce(o.request_lines, 0) = 0
),
window_lines AS (
    SELECT coalesce(sum(n_lines), 0) AS n FROM engines
),
-- ------------------------------------------------------------------------------- reasons
pinned AS (
    SELECT count(*) AS n, list(room ORDER BY first_t)[1:5] AS rooms, max(dwell_s) AS max_dwell,
        any_value(dwell_basis) AS basis, count(*) FILTER (WHERE abort_race) AS races,
        count(*) FILTER (WHERE across_restart) AS across
    FROM rq WHERE class = 'silent_pin' AND prefill_status = 'pinned'
),
fired AS (
    SELECT count(*) AS n, min(r.wd_dwell_s) AS min_dwell, max(r.wd_dwell_s) AS max_dwell,
        count(*) FILTER (WHERE NOT r.wd_same_second) AS split_second,
        count(*) FILTER (WHERE r.wd_n_ranks < coalesce(tp.tp_ranks, 0)) AS missing_ranks,
        count(*) FILTER (WHERE r.wd_dwell_s > coalesce(r.wd_timeout_s, c.timeout_s) + c.grace_s) AS late,
        list(r.room ORDER BY r.watchdog_fired_t) FILTER (
            WHERE r.wd_dwell_s > coalesce(r.wd_timeout_s, c.timeout_s) + c.grace_s)[1:5] AS late_rooms
    FROM rq AS r CROSS JOIN c LEFT JOIN tp ON tp.host = r.p_host
    WHERE r.class = 'watchdog_fired'
),
reasons AS MATERIALIZED (
    SELECT 1 AS ord, 'level' AS kind,
        format('evidence level {}: {}', c.evidence_level, CASE c.evidence_level
            WHEN 'L0' THEN 'no per-request lines, pins show only as the #inflight-req floor; --log-requests (L1) would name each request, --enable-request-time-stats-logging (L2) would time its inflight entry'
            WHEN 'L1' THEN 'dwell is measured from the prefill Receive: line, an upper bound; --enable-request-time-stats-logging (L2) would time the inflight entry'
            WHEN 'L2' THEN 'inflight entry from ReqTimeStats for finished requests, open ones timed from their Receive: line; --log-level debug (L3) would show the queue each abort hit'
            ELSE 'debug lines show the queue each abort hit'
        END) AS reason
    FROM c
    UNION ALL
    SELECT 2, 'watchdog',
        format('watchdog {}; timeout {} s ({}), grace {} s',
            CASE WHEN deployed THEN 'deployed (' || deployed_basis || ')'
                 WHEN NOT deployed THEN 'not deployed (' || deployed_basis || ')'
                 ELSE 'deployment unknown (' || deployed_basis || ')' END,
            timeout_s, timeout_source, grace_s)
    FROM c
    UNION ALL
    SELECT 10, 'missed',
        format('{} request(s) held by the prefill longer than the {} s timeout + {} s grace with no watchdog line (silent_pin; the longest {:.1f} s, by {}{}{}): {}',
            p.n, c.timeout_s, c.grace_s, p.max_dwell, replace(replace(p.basis, ' (', ', '), ')', ''),
            CASE WHEN p.races > 0 THEN format(', {} abort race(s) left pinned', p.races) ELSE '' END,
            CASE WHEN p.across > 0 THEN format(', {} across a restart', p.across) ELSE '' END,
            array_to_string(p.rooms, ', ') || CASE WHEN p.n > 5 THEN ', ...' ELSE '' END)
    FROM pinned AS p, c WHERE p.n > 0
    UNION ALL
    SELECT 11, 'missed',
        format('{}: the #inflight-req floor stayed at {} from {} to the last batch line at {} and never returned to 0: {}',
            CASE WHEN host = '' THEN 'prefill' ELSE 'prefill ' || host END, pinned_floor,
            pdf_ts(pinned_since), pdf_ts(last_sample_t),
            CASE WHEN bounded_by_names
                THEN format('{} anonymous pin(s), requests no line names that were in the queue at a batch line beyond every named request the prefill may have held then (the gauge alone would allow up to {})',
                    anonymous_pins, gauge_pins)
                WHEN requests_logged
                THEN format('up to {} anonymous pin(s), an upper bound from the gauge (the floor less the named pins; a hole on the prefill keeps the request log from narrowing it)', anonymous_pins)
                ELSE format('up to {} anonymous pin(s), an upper bound from the gauge (the floor less the named pins; no request log names the rest)', anonymous_pins) END)
    FROM anon_x WHERE anonymous_pins > 0
    UNION ALL
    SELECT 13, 'stuck',
        format('stuck outside the watchdog''s queue: {} on {}{}: #{}-req stayed at {} from {} to {} ({:.0f} s, {} batch lines); the inflight watchdog does not cover it, so whether it missed cannot be told',
            engine, CASE WHEN host = '' THEN '?' ELSE host END,
            CASE WHEN dp_rank >= 0 THEN format(' DP{}', dp_rank) WHEN tp_rank >= 0 THEN format(' TP{}', tp_rank) ELSE '' END,
            CASE queue WHEN 'waiting' THEN 'queue' ELSE queue END, value, pdf_ts(from_t), pdf_ts(to_t),
            (to_t - from_t) / 1e6, samples)
    FROM (SELECT DISTINCT ON (host, engine, queue, dp_rank, from_t // 1000000) * FROM stuck_rows)
    UNION ALL
    SELECT 12, 'gauge',
        format('{}: the #inflight-req floor stayed at {} from {} to the last batch line at {}, but at a batch line in that stretch the requests the request log names as possibly held were as many as the floor: no anonymous pin is proven (the gauge alone would allow up to {})',
            CASE WHEN host = '' THEN 'prefill' ELSE 'prefill ' || host END, pinned_floor,
            pdf_ts(pinned_since), pdf_ts(last_sample_t), gauge_pins)
    FROM anon_x WHERE bounded_by_names AND anonymous_pins = 0 AND gauge_pins > 0
    UNION ALL
    SELECT 20, 'fired',
        format('the watchdog force-failed {} request(s), dwell {:.1f}-{:.1f} s{}{}',
            n, min_dwell, max_dwell,
            CASE WHEN split_second = 0 AND missing_ranks = 0 THEN ', every TP rank in the same second'
                 ELSE format(', {} with ranks in different seconds, {} without every TP rank', split_second, missing_ranks) END,
            CASE WHEN late > 0 THEN format('; {} fired later than timeout + grace: {}', late, array_to_string(late_rooms, ', ')) ELSE '' END)
    FROM fired WHERE n > 0
    UNION ALL
    SELECT 21, 'fired',
        CASE recovery
            WHEN 'wedged' THEN format('not recovered: the watchdog fired {} time(s) on {} -> {} from {} to {} and nothing completed on that path after the first firing ({} later room(s) stuck again): a wedged transfer worker, not a one-off',
                firings, CASE WHEN p_host = '' THEN 'the prefill' ELSE p_host END, coalesce(nullif(d_host_eff, ''), 'the decode'),
                pdf_ts(first_fire_t), pdf_ts(last_fire_t), stuck_after_first)
            WHEN 'drained' THEN format('recovered: after the last firing ({}) the inflight floor was seen at 0 and {} request(s) on {} -> {} completed',
                pdf_ts(last_fire_t), completed_after_last, CASE WHEN p_host = '' THEN 'the prefill' ELSE p_host END,
                coalesce(nullif(d_host_eff, ''), 'the decode'))
            ELSE format('recovery undetermined on {} -> {}: after the last firing ({}) no completed request on that path or no empty floor shows it drained',
                CASE WHEN p_host = '' THEN 'the prefill' ELSE p_host END, coalesce(nullif(d_host_eff, ''), 'the decode'), pdf_ts(last_fire_t))
        END
    FROM recovery_rows
    UNION ALL
    SELECT 22, 'fired',
        format('{} firing(s) fired while decode was saturated: likely backpressure, not a dead peer ({})', count(*),
            array_to_string(list(room ORDER BY fired_t)[1:5], ', '))
    FROM firings WHERE backpressure HAVING count(*) > 0
    UNION ALL
    SELECT 30, 'hole',
        CASE kind
            WHEN 'short_window' THEN detail || ': nothing in it could have been stuck that long; '
                || CASE WHEN (SELECT timeout_source FROM c) = 'default'
                        -- the unknown is the timeout, not the window: the option that settles it first
                        -- (an ingest of a window reads the units' starts, where the armed line is)
                        THEN 'the timeout is only the default (no armed or firing line in the data): pass --watchdog-timeout (the armed line''s SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT)'
                        ELSE 're-run with a window of at least timeout + grace' END
            ELSE format('{} ({}{}, {} to {}), overlapping {} with no prefill evidence a full timeout after it{}',
                detail, coalesce(engine, '?'), CASE WHEN coalesce(host, '') = '' THEN '' ELSE ' on ' || host END,
                pdf_ts(from_t), pdf_ts(to_t),
                CASE WHEN suspects > 0 THEN format('{} request(s) that might be stuck ({})', suspects, array_to_string(suspect_rooms, ', '))
                     WHEN kind <> 'engine_down' AND engine = 'prefill' AND host IN (SELECT host FROM anon WHERE NOT requests_logged)
                         THEN 'an inflight floor not yet judged (no line names the requests: one that entered the prefill in it shows only in a later floor)'
                     ELSE 'an inflight floor not yet judged' END,
                CASE WHEN covered THEN '; later evidence exists, but their ends may be hidden in the hole' ELSE '' END
                    || '; widen --until a timeout + grace past the hole, or read the unit''s own log file for the lost lines')
        END
    -- an empty window's own reason (ord 34) says what to do; its length says nothing
    FROM coverage WHERE decisive AND NOT (kind = 'short_window' AND (SELECT n FROM window_lines) = 0)
    UNION ALL
    SELECT 35, 'hole',
        CASE WHEN n_kind > 3
            THEN format('{} more {} holes do not decide (the first: {} {} to {})', n_kind, kind, detail, pdf_ts(from_t), pdf_ts(to_t))
            ELSE format('{} ({}{}, {} to {}) does not decide: {}',
                detail, coalesce(engine, '?'), CASE WHEN coalesce(host, '') = '' THEN '' ELSE ' on ' || host END,
                pdf_ts(from_t), pdf_ts(to_t),
                CASE WHEN covered THEN 'later prefill evidence covers a full timeout after it'
                     WHEN kind = 'engine_down' THEN 'the requests the engine held are gone with it'
                     ELSE 'no request that might be stuck and no open floor lies in it' END) END
    FROM (SELECT *, count(*) OVER (PARTITION BY kind) AS n_kind, row_number() OVER (PARTITION BY kind ORDER BY from_t) AS k_kind
          -- restarts and stops have reasons of their own
          FROM coverage WHERE NOT decisive AND kind NOT IN ('short_window', 'engine_down'))
    WHERE n_kind <= 3 OR k_kind = 1
    UNION ALL
    -- before any hole: with no prefill line at all, a prefill hole is this, seen from the decode
    SELECT 29, 'undecided',
        'the prefill inflight queue was never observed: no prefill line in the window'
        || CASE WHEN c.decode_logged THEN ' (only the decode''s lines: export or collect the prefill''s too)' ELSE '' END
        || coalesce(format('; {} request(s) the decode finished are undecided (whether the prefill released each is not seen): {}', fin.n, fin.rooms), '')
        || coalesce('; other lines name ' || up.named, '')
    FROM c, window_lines AS wl,
        (SELECT string_agg(format('{} ({} line(s))', address, n), ', ' ORDER BY address) AS named
         FROM (SELECT unnest(unobserved_prefills, recursive := true) FROM c)) AS up
    LEFT JOIN (SELECT count(*) AS n, array_to_string(list(room ORDER BY first_t)[1:5], ', ') || CASE WHEN count(*) > 5 THEN ', ...' ELSE '' END AS rooms
               FROM rq WHERE class = 'undecided' AND decode_end_t IS NOT NULL
               HAVING count(*) > 0) AS fin ON true
    WHERE array_length(c.prefill_hosts) = 0 AND wl.n > 0
    UNION ALL
    SELECT 31, 'undecided',
        'the decode was never observed: no decode line in the window, so no transfer''s decode side and no decode queue is seen'
        || coalesce(format(' ({} request(s) the prefill handed off are undecided: {})', hand.n, hand.rooms), '')
        || '; collect the decode''s journal too (--unit, its host)'
    FROM c, window_lines AS wl
    LEFT JOIN (SELECT count(*) AS n, array_to_string(list(room ORDER BY first_t)[1:5], ', ') || CASE WHEN count(*) > 5 THEN ', ...' ELSE '' END AS rooms
               FROM rq WHERE class = 'undecided' AND coalesce(prefill_status, '') NOT IN ('hidden', 'waiting_queue', 'no_prefill', 'unnamed', 'released_late')
               HAVING count(*) > 0) AS hand ON true
    WHERE NOT c.decode_logged AND array_length(c.prefill_hosts) > 0 AND wl.n > 0
    UNION ALL
    SELECT 31, 'undecided',
        format('the prefill inflight queue was never observed on {}: no batch line with #inflight-req and no request line in the window (a non-PD server, or its stats lines were not collected; check --unit and --since cover the prefill)',
            string_agg(CASE WHEN host = '' THEN 'the prefill' ELSE host END, ', ' ORDER BY host))
    FROM unobserved HAVING count(*) > 0
    UNION ALL
    SELECT 31, 'undecided',
        format('{} prefill instance(s) named by other lines have no line of their own in the data: {}; what they held is not observed (collect their journals: a journal-remote directory missing a host''s file, or a --unit that left them out)',
            count(*), string_agg(format('{} ({} line(s): {})', address, n, array_to_string(named_by, ', ')), '; ' ORDER BY address))
    -- with no prefill line at all, the reason above already says the queue was never observed
    FROM (SELECT unnest(unobserved_prefills, recursive := true) FROM c WHERE array_length(c.prefill_hosts) > 0)
    HAVING count(*) > 0
    UNION ALL
    SELECT 38, 'undecided',
        format('the watchdog''s timeout is not known (no armed line, no firing line, no --watchdog-timeout): judged against the {} s default, {} request(s) held more than 30 s at the window end ({}) cannot be called healthy; pass --watchdog-timeout',
            any_value(c.timeout_s), count(*), array_to_string(list(r.room ORDER BY r.first_t)[1:5], ', '))
    FROM rq AS r, c
    WHERE c.timeout_source = 'default' AND r.holder_at_end IS NOT NULL AND r.last_t - coalesce(r.prefill_received_t, r.first_t) > 30000000
    HAVING count(*) > 0
    UNION ALL
    SELECT 38, 'undecided',
        format('the watchdog''s timeout is not known (no armed line, no firing line, no --watchdog-timeout): {} request(s) held more than 30 s ended by a failure or unseen ({}), as a watchdog with a timeout under the {} s default would end them; pass --watchdog-timeout',
            count(*), array_to_string(list(r.room ORDER BY r.first_t)[1:5], ', '), any_value(c.timeout_s))
    FROM rq AS r, c
    WHERE c.timeout_source = 'default' AND r.class IN ('transfer_failed', 'lost')
      -- one that left unseen was held until some moment before its prefill's queues were empty
      AND coalesce(r.prefill_end_t, r.released_by_t, r.decode_end_t, r.last_t) - coalesce(r.prefill_received_t, r.first_t) > 30000000
    HAVING count(*) > 0
    UNION ALL
    SELECT 37, 'undecided',
        format('the decode on {} showed nothing of its queues for {:.0f} s to the window end while it held {} request(s) ({}): whether they stayed stuck there is not observed; collect its lines to the window end',
            CASE WHEN h.host = '' THEN '?' ELSE h.host END, (c.end_t - coalesce(d.last_t, c.start_t)) / 1e6, count(*),
            array_to_string(list(r.room ORDER BY r.first_t)[1:5], ', '))
    FROM (SELECT DISTINCT host FROM engines WHERE engine = 'decode') AS h
    LEFT JOIN (SELECT unnest(decode_evidence, recursive := true) FROM c) AS d USING (host)
    CROSS JOIN c
    JOIN rq AS r ON r.holder_at_end = 'decode' AND coalesce(r.d_host, h.host) = h.host
    WHERE c.end_t - coalesce(d.last_t, c.start_t) > c.stuck_us
    GROUP BY h.host, d.last_t, c.end_t, c.start_t
    UNION ALL
    SELECT 36, 'undecided',
        format('{} on {} died at {} and was not seen again: what it held is lost, and nothing after is observed (collect its journal after the crash, or widen --until past its restart)',
            engine, CASE WHEN host = '' THEN '?' ELSE host END, pdf_ts(stop_t))
    FROM restarts WHERE kind = 'stopped' AND how LIKE 'died%'
    UNION ALL
    -- An ingest run that did not complete (interrupted, killed, a full disk) stored only the batches
    -- it committed: what it had not read yet is missing from the window, silently. Until a run of
    -- the same sources completes, the window cannot be judged whole.
    SELECT 31, 'undecided',
        format('ingest run {} was {} after storing {} line(s) in the window, and no run of the same sources has completed since: the lines it had not read yet are missing (rerun the same ingest to complete it)',
            i.ingest_id, CASE WHEN i.status = 'running' THEN 'killed' ELSE i.status END, n.lines)
    FROM ingests AS i
    JOIN (SELECT l.ingest_id, count(*) AS lines FROM lines AS l, c
          WHERE l.ts_us >= c.start_t AND l.ts_us <= c.end_t GROUP BY l.ingest_id) AS n USING (ingest_id)
    WHERE i.status IN ('interrupted', 'running')
      AND NOT EXISTS (SELECT 1 FROM ingests AS j
                      WHERE j.ingest_id > i.ingest_id AND j.status = 'complete' AND j.sources = i.sources)
    UNION ALL
    -- A zone-less time in the hour the clock repeats (the autumn DST change) names two instants;
    -- ingest reads them in file order (a step back inside the hour starts its second pass). A
    -- file with no such step cannot say which pass its lines were: read as the first, they may
    -- be an hour early, and a pin, a restart or a silence there is not placed.
    SELECT 31, 'undecided',
        format('{} line(s) of {} fall in the hour the clock repeated (DST end, from {}) and the file''s order does not say which pass each was (no step back inside the hour): read as the first pass, they may be an hour early; read the file with the UTC offset then in force (--tz +HH:MM), or judge a window that leaves the hour out',
            f.n, f.source, pdf_ts(f.lo))
    FROM c, (SELECT source_key, any_value(source) AS source, min(ts_us) AS lo,
                    count(*) FILTER (WHERE ts_origin = 'app_fold1' AND ts_us BETWEEN (SELECT start_t FROM c) AND (SELECT end_t FROM c)) AS n,
                    bool_or(ts_origin = 'app_fold2') AS stepped
             FROM lines WHERE ts_origin IN ('app_fold1', 'app_fold2') GROUP BY source_key) AS f
    WHERE NOT f.stepped AND f.n > 0
    UNION ALL
    SELECT 34, 'undecided',
        CASE WHEN c.data_end_us IS NULL AND stored.n = 0 AND EXISTS (SELECT 1 FROM metric_only)
            THEN 'no log lines in the window: the database holds Prometheus samples only (the journal rotated away, or was not ingested); what the gauges alone show is below'
            WHEN c.data_end_us IS NULL AND stored.n = 0
            THEN 'no lines in the window: the database holds no line (nothing was ingested: check --unit / --since / journal access)'
            WHEN c.data_end_us IS NULL
            THEN format('no lines in the window: {} line(s) stored, none with a time I know (its prefix may be a form I do not know: ingest --prefixes adds one; or pass --tz / --date)',
                        stored.n)
            ELSE format('no lines in the window ({} to {}); {}',
            coalesce(pdf_ts(c.start_t), 'the start'), coalesce(pdf_ts(c.end_t), 'the end'),
            CASE
                 WHEN c.data_end_us < c.start_t
                 THEN format('no line after {}: the database ends {} before the window starts: ingest again (a new ingest reads what was logged since), or widen --since',
                             pdf_ts(c.data_end_us), CASE WHEN c.start_t - c.data_end_us >= 5400000000
                                                         THEN format('{:.1f} h', (c.start_t - c.data_end_us) / 3.6e9)
                                                         ELSE format('{:.0f} min', (c.start_t - c.data_end_us) / 6e7) END)
                 WHEN c.data_start_us > c.end_t THEN 'the data starts at ' || pdf_ts(c.data_start_us) || ': widen --since/--until'
                 ELSE format('the data spans {} to {}: widen --since/--until', pdf_ts(c.data_start_us), pdf_ts(c.data_end_us)) END) END
    FROM c, window_lines AS wl, (SELECT count(*) AS n FROM lines) AS stored WHERE wl.n = 0
    UNION ALL
    SELECT 32, 'undecided',
        format('{} request(s) undecided: {} ({}); {}', count(*), any_value(undecided_reason),
            array_to_string(list(room ORDER BY first_t)[1:5], ', ') || CASE WHEN count(*) > 5 THEN ', ...' ELSE '' END,
            CASE prefill_status
                WHEN 'waiting_queue' THEN 'L2 time stats (--enable-request-time-stats-logging) would time its inflight entry'
                WHEN 'unnamed' THEN 'read the prefill''s own log file (journald may have dropped its lines), or widen --since/--until'
                WHEN 'released_late' THEN 'read the prefill''s own log file for its end or the watchdog''s line (journald may have dropped them)'
                ELSE 'ingest the prefill''s journal or log too' END)
    FROM rq WHERE prefill_status IN ('waiting_queue', 'no_prefill', 'unnamed', 'released_late') AND class = 'undecided'
    GROUP BY prefill_status
    UNION ALL
    SELECT 32, 'undecided',
        format('{} request(s) undecided: {} ({}); ingest each deployment into a database of its own, or give its routers distinct rooms',
            count(*), any_value(undecided_reason),
            array_to_string(list(format('{} on {}', room, deployment) ORDER BY first_t)[1:5], ', ') || CASE WHEN count(*) > 5 THEN ', ...' ELSE '' END)
    FROM rq WHERE decode_unpaired AND class = 'undecided'
    HAVING count(*) > 0
    UNION ALL
    SELECT 33, 'undecided',
        format('{}: the #inflight-req floor was {} at the last batch line ({}) and the timeout has since passed, but no later batch line shows whether it drained; re-run once the prefill has logged another batch line (a /health probe runs one)',
            CASE WHEN host = '' THEN 'prefill' ELSE 'prefill ' || host END, open_floor + pinned_floor, pdf_ts(last_sample_t))
    FROM anon WHERE unresolved
    UNION ALL
    SELECT 40, 'storm',
        format('abort storm at {}: {} aborts in {:.0f} s, {}; inflight peak {}, floor before {}{}',
            pdf_ts(from_t), aborts, duration_s, judgement, coalesce(peak_inflight::VARCHAR, '?'),
            coalesce(base_floor::VARCHAR, '?'),
            CASE WHEN drained_t IS NOT NULL THEN ', back by ' || pdf_ts(drained_t) ELSE '' END)
    FROM storm_rows
    UNION ALL
    SELECT 44, 'evidence',
        format('{} of {} lines of {}{} have no timestamp I know ({} without a recognised prefix): check the format, or pass --tz/--date',
            no_time, lines, coalesce(unit, source), CASE WHEN coalesce(host, '') = '' THEN '' ELSE ' on ' || host END,
            no_prefix)
    FROM (SELECT source, host, unit, sum(lines) AS lines, sum(no_time) AS no_time, sum(no_prefix) AS no_prefix
          FROM source_stats GROUP BY ALL)
    WHERE lines >= 10 AND no_time * 2 > lines
    UNION ALL
    SELECT 39, 'undecided',
        format('the metrics show {} holding at least {} request(s) in its inflight queue from {} to {} ({} scrape(s), every {:.0f} s), {:.0f} s of it from {} with no line of its own showing that queue: SGLang sets that gauge only with a batch line, or every 30 s while fully idle, so a request held there (or a queue that kept its scheduler busy) cannot be told from the last batch''s count, and its lines do not say it left; nothing may be called healthy (docs/prometheus.md)',
            CASE WHEN host = '' THEN 'the prefill' ELSE host END, at_least, pdf_ts(from_t), pdf_ts(to_t), scrapes,
            interval_us / 1e6, quiet_us / 1e6, pdf_ts(quiet_from))
    FROM metric_quiet_holds
    UNION ALL
    SELECT 38, 'undecided',
        format('the metrics show prefill {} ({} scrape(s) of its inflight gauge, {} to {}, every {:.0f} s{}) and no line of it is in the window (its journal rotated away, its file was not collected, --prometheus-map does not name it, or it is another deployment''s target: --match reads one deployment''s): {}; SGLang sets that gauge only with a batch line, or every 30 s while fully idle, so a 0 is the last count, not the queue since: metrics alone never earn nothing_stuck (docs/prometheus.md)',
            CASE WHEN target = '' THEN '?' ELSE target END, scrapes, pdf_ts(from_t), pdf_ts(to_t), interval_us / 1e6,
            CASE WHEN gaps > 0 THEN format(', {} scrape gap(s)', gaps) ELSE '' END,
            CASE WHEN held_past_timeout
                 THEN format('it held at least {} request(s) for {:.0f} s from {}, past the timeout + grace: a pin may be there, and no line is left to name it or to show the watchdog release it',
                             at_least, held_us / 1e6, pdf_ts(held_from))
                 WHEN peak >= 1 THEN format('nothing held past the timeout + grace (peak {:.0f})', peak)
                 ELSE 'the gauge read 0 throughout' END)
    FROM metric_only
    UNION ALL
    SELECT 46, 'evidence',
        format('metrics beside the logs: {} scrape(s) of the inflight gauge of {} (every {:.0f} s, the resolution of what they show; docs/prometheus.md)',
            count(*), string_agg(DISTINCT CASE WHEN host = '' THEN 'the prefill' ELSE host END, ', '), median(step_us) / 1e6)
    FROM metric_scrapes
    HAVING count(*) > 0
    UNION ALL
    SELECT 45, 'evidence',
        format('the logging changed at run time on {} ({}): the evidence level is not the same through the window, and requests the request log did not name show only in the gauge',
            CASE WHEN lc.host = '' THEN 'the prefill' ELSE lc.host END,
            string_agg(pdf_ts(lc.t_us) || ': ' || concat_ws(', ',
                CASE WHEN lc.log_requests IS NOT NULL THEN 'log_requests=' || lc.log_requests::VARCHAR END,
                CASE WHEN lc.log_level IS NOT NULL THEN 'log_level=' || lc.log_level END), '; ' ORDER BY lc.t_us))
    FROM (SELECT unnest(logging_changes, recursive := true) FROM c) AS lc
    GROUP BY lc.host
    UNION ALL
    SELECT 50, 'restart',
        format('{} on {} {} ({} to {}){}', engine, CASE WHEN host = '' THEN '?' ELSE host END,
            CASE WHEN kind = 'stopped' THEN 'stopped' ELSE 'restarted' END,
            pdf_ts(stop_t), coalesce(pdf_ts(up_t), 'the window end'),
            CASE WHEN kind = 'stopped' THEN ', and did not come back' ELSE '' END)
    FROM restarts
    UNION ALL
    SELECT 60, 'summary',
        format('{} requests: {} completed, {} in flight, {} undecided, {} silent pin(s), {} released by the watchdog, {} aborted ({} abort races), {} retracted, {} transfer failed, {} lost',
            requests, completed, in_flight, undecided, silent_pin, watchdog_fired, aborted, abort_races, retracted,
            transfer_failed, lost)
    FROM counts WHERE requests > 0  -- counts of nothing are no finding
),
-- The watchdog's firings (the `watchdog_firings` view): every rank should fire in the same second
-- (the patch checks the deadline before the all-reduce); late: the dwell exceeds the timeout by
-- more than one poll loop (grace).
-- Every request that did not complete, in class order (design.md §3), then by first line.
not_completed AS (
    SELECT r.bootstrap_room, r.deployment, r.prefill_rid, r.decode_rid, r.class, r.abort_race, r.across_restart, r.one_sided, r.dwell_s,
        r.dwell_basis, r.evidence_level, r.abort_race_outcome, r.prefill_status, r.undecided_reason, r.lost_reason, r.reason,
        r.first_t, fl.backpressure, r.legs, r.p_host, r.d_host, r.holder_at_end
    FROM rq AS r LEFT JOIN fire_load AS fl USING (key)
    WHERE r.class <> 'completed'
),
flags AS (
    SELECT
        counts.proven_pins + (SELECT coalesce(sum(anonymous_pins), 0) FROM anon) AS stuck_silently,
        counts.watchdog_fired AS fired,
        (SELECT count(*) FROM coverage WHERE decisive) AS decisive_holes,
        -- undecided requests, and what leaves the window unobserved
        -- a queue the watchdog does not watch, frozen: something is stuck, but not the watchdog's to release
        counts.undecided + (SELECT count(*) FROM reasons WHERE ord IN (13, 29, 31, 33, 34, 36, 37, 38, 39)) AS undecided_facts
    FROM counts
),
vd AS MATERIALIZED (
    SELECT
        CASE
            WHEN f.stuck_silently > 0 THEN 'watchdog_missed'
            WHEN f.decisive_holes > 0 OR f.undecided_facts > 0 THEN 'inconclusive'
            WHEN f.fired > 0 THEN 'watchdog_fired'
            ELSE 'nothing_stuck'
        END AS verdict
    FROM flags AS f
),
-- A green answer says what earned it: the queues observed through the window.
clean AS (
    SELECT 9 AS ord, 'clean' AS kind,
        format('nothing was held past the {} s timeout + {} s grace: {} observed through the window ({}){}',
            c.timeout_s, c.grace_s,
            CASE WHEN count(*) = 1 THEN 'the prefill inflight queue was' ELSE format('{} prefills'' inflight queues were', count(*)) END,
            string_agg(format('{}{} batch line(s) with #inflight-req, longest gap {:.0f} s',
                CASE WHEN o.host = '' THEN '' ELSE o.host || ': ' END, o.inflight,
                coalesce(o.inflight_gap_us, c.end_t - c.start_t) / 1e6), '; ' ORDER BY o.host),
            CASE WHEN any_value(counts.requests) > 0 THEN format(', and all {} request(s) the lines name ended or are younger than the timeout', any_value(counts.requests)) ELSE '' END)
    FROM observed AS o, c, counts, vd
    WHERE o.engine = 'prefill' AND vd.verdict = 'nothing_stuck'
    GROUP BY c.timeout_s, c.grace_s
),
window_reason AS (
    SELECT 3 AS ord, 'window' AS kind,
        format('window {} to {}: the last ingest''s (run {}); older lines are context only (pass --since/--until to judge another window)',
            pdf_ts(c.start_t), pdf_ts(c.end_t), c.window_runs) AS reason
    FROM c WHERE c.window_basis = 'last ingest'
),
-- The reason that decided comes first, then the evidence and its caveats.
all_reasons AS MATERIALIZED (
    SELECT r.*,
        CASE vd.verdict
            WHEN 'watchdog_missed' THEN r.kind = 'missed'
            WHEN 'inconclusive' THEN r.kind IN ('undecided', 'stuck') OR (r.kind = 'hole' AND r.ord = 30)
            WHEN 'watchdog_fired' THEN r.kind = 'fired'
            ELSE r.kind = 'clean'
        END AS decides
    FROM (SELECT * FROM reasons UNION ALL SELECT * FROM clean UNION ALL SELECT * FROM window_reason) AS r, vd
    WHERE r.reason IS NOT NULL
)
SELECT
    vd.verdict,
    c.start_t AS window_start_t, c.end_t AS window_end_t,
    c.timeout_s, c.timeout_source, c.deployed, c.deployed_basis, c.grace_s, c.evidence_level,
    counts.* EXCLUDE (undecided),
    (SELECT coalesce(sum(anonymous_pins), 0) FROM anon)::BIGINT AS anonymous_pins,
    counts.undecided, f.decisive_holes,
    (SELECT list(reason ORDER BY NOT decides, ord, reason) FROM all_reasons) AS reasons,
    (SELECT list(r ORDER BY NOT r.decides, r.ord, r.reason) FROM all_reasons AS r) AS reason_rows,
    (SELECT list(x ORDER BY x.from_t) FROM coverage AS x) AS coverage,
    (SELECT list(a ORDER BY a.host) FROM anon_rows AS a) AS anonymous_pin_rows,
    (SELECT list(st ORDER BY st.from_t) FROM storm_rows AS st) AS abort_storms,
    (SELECT list(w ORDER BY w.fired_t, w.bootstrap_room) FROM firings AS w) AS watchdog_firing_rows,
    (SELECT list(n ORDER BY pdf_class_rank(n.class), n.first_t, n.bootstrap_room, n.deployment) FROM not_completed AS n)
        AS not_completed,
    c.window_basis, c.observed, c.unobserved_prefills,
    (SELECT recovery FROM recovery) AS recovery,
    (SELECT list(x ORDER BY x.from_t, x.host, x.queue) FROM stuck_rows AS x) AS frozen_queues,
    (SELECT list(x ORDER BY x.first_fire_t) FROM recovery_rows AS x) AS recovery_rows,
    -- the metrics beside each prefill of the logs: evidence of their own kind, at scrape resolution
    (SELECT list(x ORDER BY x.host) FROM (
        SELECT host, count(DISTINCT series) AS series, count(*) AS scrapes, median(step_us) AS interval_us,
            min(t_us) AS first_t, max(t_us) AS last_t
        FROM metric_scrapes GROUP BY host) AS x) AS metric_observed
FROM c, counts, flags AS f, vd;
