-- The window's verdict, as one row (design.md §3), first match wins:
--   watchdog_missed  something was stuck past timeout+grace with no watchdog line: silent pins, or
--                    anonymous pins in the gauge (proven pins win over holes elsewhere)
--   inconclusive     the window is shorter than the timeout; no prefill line at all; a decisive hole
--                    (see `coverage`); an undecided request; an L0 floor that no later sample resolves
--   watchdog_fired   stuck requests existed and the watchdog released every one of them
--   nothing_stuck    none of the above: nothing stayed past the timeout, the floor drained, and
--                    coverage was sufficient
-- Along with it, as lists (unnested by the views in 07_findings.sql): coverage (holes and whether
-- they decide), anonymous_pins (per prefill host), abort_storms, reason_rows.
CREATE OR REPLACE VIEW verdict AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
rq AS MATERIALIZED (
    SELECT bootstrap_room, room, class, prefill_status, holder_at_end, p_host, might_be_stuck, first_t, last_t,
        hole_ids, dwell_s, dwell_basis, abort_race, across_restart, aborted_t, abort_race_outcome, undecided_reason,
        watchdog_fired_t, wd_dwell_s, wd_same_second, wd_n_ranks, wd_timeout_s
    FROM requests
),
holes AS MATERIALIZED (SELECT unnest(holes, recursive := true) FROM c),
gauge AS MATERIALIZED (SELECT unnest(host_gauge, recursive := true) FROM c),
restarts AS MATERIALIZED (SELECT unnest(engine_restarts, recursive := true) FROM c),
engines AS MATERIALIZED (SELECT unnest(engine_coverage, recursive := true) FROM c),
tp AS (SELECT unnest(prefill_tp_ranks, recursive := true) FROM c),
ig AS MATERIALIZED (SELECT t_us, floor, inflight_req FROM inflight_gauge),

counts AS MATERIALIZED (
    SELECT
        count(*) FILTER (WHERE class = 'watchdog_fired') AS watchdog_fired,
        count(*) FILTER (WHERE class = 'silent_pin') AS silent_pin,
        count(*) FILTER (WHERE class = 'silent_pin' AND prefill_status = 'pinned') AS proven_pins,
        count(*) FILTER (WHERE class = 'transfer_failed') AS transfer_failed,
        count(*) FILTER (WHERE class = 'aborted') AS aborted,
        count(*) FILTER (WHERE class = 'lost') AS lost,
        count(*) FILTER (WHERE class = 'completed') AS completed,
        count(*) FILTER (WHERE class = 'in_flight') AS in_flight,
        count(*) FILTER (WHERE prefill_status IN ('hidden', 'waiting_queue', 'no_prefill')) AS undecided,
        count(*) FILTER (WHERE abort_race) AS abort_races,
        count(*) FILTER (WHERE across_restart) AS across_restart,
        count(*) AS requests
    FROM rq
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
        count(*) FILTER (WHERE class = 'silent_pin' OR prefill_status IN ('hidden', 'waiting_queue')) AS named_old,
        count(*) FILTER (WHERE holder_at_end = 'prefill') AS named_open
    FROM rq WHERE p_host IS NOT NULL GROUP BY p_host
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
anon AS MATERIALIZED (
    SELECT
        h.host, h.samples, h.last_sample_t, h.pinned_floor, h.pinned_since,
        greatest(h.pinned_floor - coalesce(n.named_old, 0), 0)::BIGINT AS anonymous_pins,
        h.open_floor, h.open_since,
        coalesce(e.evidence_level >= 'L1', false) AS requests_logged,
        h.open_old AND NOT coalesce(e.evidence_level >= 'L1', false)
            AND h.open_floor + h.pinned_floor > coalesce(n.named_open, 0) AS unresolved
    FROM per_host AS h
    LEFT JOIN named AS n USING (host)
    LEFT JOIN (SELECT host, max(evidence_level) AS evidence_level FROM engines WHERE engine = 'prefill' GROUP BY host) AS e
      USING (host)
),

-- ------------------------------------------------------------------------------ coverage
-- A hole decides (makes the verdict inconclusive) when it overlaps a request that might be stuck
-- (or an L0 floor not yet judged) and no prefill evidence covers a full timeout+grace after it;
-- or when a request's end may be hidden in it. A window shorter than the timeout always decides.
suspects AS (
    SELECT bootstrap_room, room, p_host, first_t, last_t FROM rq WHERE might_be_stuck
),
hit AS (
    SELECT h.hole_id, count(DISTINCT su.bootstrap_room) AS n, list(su.room ORDER BY su.first_t)[1:5] AS rooms
    FROM holes AS h JOIN suspects AS su
      ON h.from_t <= su.last_t AND h.to_t >= su.first_t
     AND (h.engine IS DISTINCT FROM 'prefill' OR h.host = '' OR su.p_host IS NULL OR h.host = su.p_host)
    GROUP BY h.hole_id
),
hid AS (
    SELECT hole_id, count(*) AS n, list(room ORDER BY room)[1:5] AS rooms
    FROM (SELECT unnest(hole_ids) AS hole_id, room FROM rq WHERE prefill_status = 'hidden')
    GROUP BY hole_id
),
floors AS (
    SELECT h.hole_id
    FROM holes AS h JOIN anon AS a
      ON NOT a.requests_logged AND a.open_floor > 0
     AND h.to_t >= a.open_since AND (h.engine IS DISTINCT FROM 'prefill' OR h.host = '' OR h.host = a.host)
    GROUP BY h.hole_id
),
coverage AS MATERIALIZED (
    SELECT
        h.hole_id, h.kind, h.host, h.engine, h.unit, h.from_t, h.to_t, h.n, h.detail, h.covered,
        coalesce(hit.n, 0) + coalesce(hid.n, 0) AS suspects,
        list_distinct(coalesce(hit.rooms, []) || coalesce(hid.rooms, [])) AS suspect_rooms,
        fl.hole_id IS NOT NULL AS overlaps_open_floor,
        (NOT h.covered AND (coalesce(hit.n, 0) > 0 OR fl.hole_id IS NOT NULL)) OR coalesce(hid.n, 0) > 0 AS decisive
    FROM holes AS h
    LEFT JOIN hit USING (hole_id)
    LEFT JOIN hid USING (hole_id)
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
    SELECT bootstrap_room, aborted_t AS t, class, abort_race_outcome FROM rq WHERE aborted_t IS NOT NULL
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
            WHEN 'L2' THEN 'inflight entry from ReqTimeStats for finished requests, open ones timed from Receive:; --log-level debug (L3) would show the queue each abort hit'
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
        format('{} request(s) held by the prefill longer than the {} s timeout + {} s grace with no watchdog line (silent_pin, longest {:.1f} s by {}{}{}): {}',
            p.n, c.timeout_s, c.grace_s, p.max_dwell, p.basis,
            CASE WHEN p.races > 0 THEN format(', {} abort race(s) left pinned', p.races) ELSE '' END,
            CASE WHEN p.across > 0 THEN format(', {} across a restart', p.across) ELSE '' END,
            array_to_string(p.rooms, ', ') || CASE WHEN p.n > 5 THEN ', ...' ELSE '' END)
    FROM pinned AS p, c WHERE p.n > 0
    UNION ALL
    SELECT 11, 'missed',
        format('{}: the #inflight-req floor stayed at {} from {} to the last batch line at {} and never returned to 0: {} anonymous pin(s)',
            CASE WHEN host = '' THEN 'prefill' ELSE 'prefill ' || host END, pinned_floor,
            pdf_ts(pinned_since), pdf_ts(last_sample_t), anonymous_pins)
    FROM anon WHERE anonymous_pins > 0
    UNION ALL
    SELECT 20, 'fired',
        format('the watchdog force-failed {} request(s), dwell {:.1f}-{:.1f} s{}{}',
            n, min_dwell, max_dwell,
            CASE WHEN split_second = 0 AND missing_ranks = 0 THEN ', every TP rank in the same second'
                 ELSE format(', {} with ranks in different seconds, {} without every TP rank', split_second, missing_ranks) END,
            CASE WHEN late > 0 THEN format('; {} fired later than timeout + grace: {}', late, array_to_string(late_rooms, ', ')) ELSE '' END)
    FROM fired WHERE n > 0
    UNION ALL
    SELECT 30, 'hole',
        CASE kind
            WHEN 'short_window' THEN detail || ': nothing in it could have been stuck that long'
            ELSE format('{} ({}{}, {} to {}), overlapping {} with no prefill evidence a full timeout after it{}',
                detail, coalesce(engine, '?'), CASE WHEN coalesce(host, '') = '' THEN '' ELSE ' on ' || host END,
                pdf_ts(from_t), pdf_ts(to_t),
                CASE WHEN suspects > 0 THEN format('{} request(s) that might be stuck ({})', suspects, array_to_string(suspect_rooms, ', '))
                     ELSE 'an inflight floor not yet judged' END,
                CASE WHEN covered THEN ' (later evidence exists, but their ends may be hidden in the hole)' ELSE '' END)
        END
    FROM coverage WHERE decisive
    UNION ALL
    SELECT 31, 'undecided', 'no prefill line in the window: the prefill inflight queue is not observed'
    FROM c WHERE len(c.prefill_hosts) = 0
    UNION ALL
    SELECT 32, 'undecided',
        format('{} request(s) undecided: {} ({})', count(*), any_value(undecided_reason),
            array_to_string(list(room ORDER BY first_t)[1:5], ', ') || CASE WHEN count(*) > 5 THEN ', ...' ELSE '' END)
    FROM rq WHERE prefill_status IN ('waiting_queue', 'no_prefill')
    GROUP BY prefill_status
    UNION ALL
    SELECT 33, 'undecided',
        format('{}: the #inflight-req floor was {} at the last batch line ({}) and the timeout has since passed, but no later batch line shows whether it drained',
            CASE WHEN host = '' THEN 'prefill' ELSE 'prefill ' || host END, open_floor + pinned_floor, pdf_ts(last_sample_t))
    FROM anon WHERE unresolved
    UNION ALL
    SELECT 40, 'storm',
        format('abort storm {} ({:.0f} s, {} aborts): {}; inflight peak {}, floor before {}{}',
            pdf_ts(from_t), duration_s, aborts, judgement, coalesce(peak_inflight::VARCHAR, '?'),
            coalesce(base_floor::VARCHAR, '?'),
            CASE WHEN drained_t IS NOT NULL THEN ', back by ' || pdf_ts(drained_t) ELSE '' END)
    FROM storm_rows
    UNION ALL
    SELECT 50, 'restart',
        format('{} on {} {} ({} to {}){}', engine, CASE WHEN host = '' THEN '?' ELSE host END,
            CASE WHEN kind = 'stopped' THEN 'stopped' ELSE 'restarted' END,
            pdf_ts(stop_t), coalesce(pdf_ts(up_t), 'the window end'),
            CASE WHEN kind = 'stopped' THEN ', and did not come back' ELSE '' END)
    FROM restarts
    UNION ALL
    SELECT 60, 'summary',
        format('{} requests: {} completed, {} in flight, {} aborted ({} abort races), {} transfer failed, {} lost',
            requests, completed, in_flight, aborted, abort_races, transfer_failed, lost)
    FROM counts
),
flags AS (
    SELECT
        -- silent pins whose end a hole may hide are undecided, not proof
        counts.proven_pins + (SELECT coalesce(sum(anonymous_pins), 0) FROM anon) AS stuck_silently,
        counts.watchdog_fired AS fired,
        (SELECT count(*) FROM coverage WHERE decisive) AS decisive_holes,
        (SELECT count(*) FROM reasons WHERE ord IN (31, 32, 33)) + counts.undecided AS undecided
    FROM counts
)
SELECT
    CASE
        WHEN f.stuck_silently > 0 THEN 'watchdog_missed'
        WHEN f.decisive_holes > 0 OR f.undecided > 0 THEN 'inconclusive'
        WHEN f.fired > 0 THEN 'watchdog_fired'
        ELSE 'nothing_stuck'
    END AS verdict,
    c.start_t AS window_start_t, c.end_t AS window_end_t,
    c.timeout_s, c.timeout_source, c.deployed, c.deployed_basis, c.grace_s, c.evidence_level,
    counts.* EXCLUDE (undecided),
    (SELECT coalesce(sum(anonymous_pins), 0) FROM anon)::BIGINT AS anonymous_pins,
    f.undecided, f.decisive_holes,
    (SELECT list(reason ORDER BY ord, reason) FROM reasons) AS reasons,
    (SELECT list(r ORDER BY r.ord, r.reason) FROM reasons AS r) AS reason_rows,
    (SELECT list(x ORDER BY x.from_t) FROM coverage AS x) AS coverage,
    (SELECT list(a ORDER BY a.host) FROM anon AS a) AS anonymous_pin_rows,
    (SELECT list(st ORDER BY st.from_t) FROM storm_rows AS st) AS abort_storms
FROM c, counts, flags AS f;
