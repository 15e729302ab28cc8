-- Each request as spans: one per engine side, its phases nested inside. Both trace exporters draw
-- requests from here (pdforensics/exporters/requests.py), so Perfetto and OTLP agree.
--
-- One row per span, in drawing order (req_ord, side_ord, span_ord): span_ord 0 is the side (phase
-- NULL; `marks` its failure-like events), 1.. its phases (ord: their lifecycle order). `$window_end` closes a side with
-- no end in the logs (open: exactly the span SGLang's own tracing never exports, as it never ends).
-- Phases are made sequential and clipped to their side, so they always nest: a child never
-- outlives its parent and siblings never overlap. Times are the reference clock's (t_us).
WITH req AS (
    SELECT *, row_number() OVER (ORDER BY first_t NULLS LAST, bootstrap_room) AS req_ord
    FROM requests
),
-- A phase marker starts the named stretch on its side, in this lifecycle order.
labels(phase, ord, prefill_label, decode_label) AS (
    VALUES ('received', 1, 'queued (bootstrap, waiting, forward)', 'prealloc, transfer, decode'),
           ('bootstrap_done', 2, 'waiting and forward', 'waiting and forward'),
           ('inflight_entry', 3, 'inflight (KV transfer)', 'inflight (KV transfer)'),
           ('pinned_from', 4, 'held past the waiting queue', 'held past the waiting queue'),
           ('watchdog_deadline', 5, 'past the watchdog deadline', 'past the watchdog deadline')
),
first_marker AS (  -- a side with no Receive: starts at its first marker
    SELECT bootstrap_room, engine, min(t_us) AS t_us FROM request_phases GROUP BY ALL
),
sides AS (
    SELECT r.req_ord, r.bootstrap_room, s.engine, s.side_ord, r.first_t,
           CASE s.engine WHEN 'prefill' THEN r.p_host ELSE r.d_host END AS host,
           CASE s.engine WHEN 'prefill' THEN r.prefill_rid ELSE r.decode_rid END AS rid,
           CASE s.engine WHEN 'prefill' THEN r.prefill_received_t ELSE r.decode_received_t END AS received_t,
           CASE s.engine WHEN 'prefill' THEN coalesce(r.prefill_end_t, r.p_gone_t)
                ELSE coalesce(r.decode_end_t, r.d_gone_t) END AS end_t,
           r.class, r.abort_race, r.abort_race_outcome, r.across_restart, r.one_sided, r.dwell_s,
           r.dwell_basis, r.evidence_level, r.reason, r.lost_reason, r.holder_at_end
    FROM req AS r CROSS JOIN (VALUES ('prefill', 0), ('decode', 1)) AS s(engine, side_ord)
),
side_spans AS (
    SELECT s.*, coalesce(s.received_t, f.t_us, CASE WHEN s.host IS NOT NULL THEN s.first_t END) AS start_t
    FROM sides AS s LEFT JOIN first_marker AS f USING (bootstrap_room, engine)
),
placed AS (
    SELECT * EXCLUDE (end_t), end_t IS NULL AS open,
           greatest(coalesce(end_t, greatest($window_end, start_t)), start_t) AS end_t
    FROM side_spans WHERE start_t IS NOT NULL
),
markers AS (  -- two estimates of one marker: the first stands
    SELECT p.bootstrap_room, p.engine, p.phase, l.ord, p.t_us,
           CASE p.engine WHEN 'decode' THEN l.decode_label ELSE l.prefill_label END AS label
    FROM request_phases AS p JOIN labels AS l USING (phase)
    WHERE p.t_us IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY p.bootstrap_room, p.engine, p.phase ORDER BY p.t_us) = 1
),
starts AS (  -- a time that contradicts the lifecycle order moves up to the marker before it
    SELECT s.req_ord, s.bootstrap_room, s.engine, s.side_ord, s.open AS side_open, s.end_t AS side_end,
           m.phase, m.ord, m.label,
           least(greatest(s.start_t, max(m.t_us) OVER w), s.end_t) AS t,
           row_number() OVER w = count(*) OVER (PARTITION BY s.req_ord, s.engine) AS last
    FROM placed AS s JOIN markers AS m USING (bootstrap_room, engine)
    WINDOW w AS (PARTITION BY s.req_ord, s.engine ORDER BY m.ord ROWS UNBOUNDED PRECEDING)
),
stretches AS (
    SELECT *, coalesce(lead(t) OVER (PARTITION BY req_ord, engine ORDER BY ord), side_end) AS end_t
    FROM starts
),
phases AS (
    SELECT *, count(*) OVER (PARTITION BY req_ord, engine) AS n FROM stretches WHERE end_t > t OR last
),
marks AS (  -- failure-like events worth a mark (one per engine, event and reason: TP ranks merge)
    SELECT bootstrap_room, engine,
           list(struct_pack(event, reason, state, dwell_s, t_us, ranks, message) ORDER BY t_us) AS marks
    FROM (
        SELECT e.bootstrap_room, e.engine, e.host, e.event, e.reason, min(e.state) AS state,
               max(e.dwell_s) AS dwell_s, min(e.t_us) AS t_us,
               list_sort(list(DISTINCT coalesce(e.rank, e.tp_rank)) FILTER (
                   WHERE coalesce(e.rank, e.tp_rank) IS NOT NULL)) AS ranks,
               arg_min(l.message, e.t_us) AS message
        FROM room_events AS e JOIN lines AS l USING (line_id)
        WHERE e.reason_kind IS NOT NULL OR e.event = 'watchdog_fired'
        GROUP BY ALL
    )
    GROUP BY ALL
)
SELECT s.req_ord, s.bootstrap_room, s.engine, s.side_ord, 0 AS span_ord, s.host, s.rid,
       s.engine || ' Req ' || left(coalesce(s.rid, s.bootstrap_room::VARCHAR), 8) AS name,
       s.start_t, s.end_t, s.open, NULL::VARCHAR AS phase,
       s.class, s.abort_race, s.abort_race_outcome, s.across_restart, s.one_sided, s.dwell_s,
       s.dwell_basis, s.evidence_level, s.reason, s.lost_reason, s.holder_at_end, m.marks
FROM placed AS s LEFT JOIN marks AS m USING (bootstrap_room, engine)
UNION ALL BY NAME
-- a lone "received" stretch covering the whole side says nothing the side does not
SELECT req_ord, bootstrap_room, engine, side_ord, ord AS span_ord,
       label AS name,
       t AS start_t, end_t, side_open AND last AS open, phase
FROM phases WHERE NOT (n = 1 AND phase = 'received')
ORDER BY req_ord, side_ord, span_ord
