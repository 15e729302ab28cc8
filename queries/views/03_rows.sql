-- Row-level views: window events on the reference clock, the lines that name a request, and the
-- prefill inflight gauge samples.

-- All window events with t_us, their time on the reference clock.
CREATE OR REPLACE VIEW evt AS
WITH o AS MATERIALIZED (SELECT unnest(host_offsets, recursive := true) FROM context)
SELECT e.* REPLACE (coalesce(e.host, '') AS host), e.ts_us - o.offset_us AS t_us
FROM events AS e
JOIN o ON o.host = coalesce(e.host, '') AND e.ts_us >= o.lo_us AND e.ts_us <= o.hi_us;

-- One row per line that names a request. `bootstrap_room` is the only key both engines share.
-- Health checks are not requests: room 0, bootstrap_host 2.2.2.2, rid HEALTH_CHECK_*.
-- reason_kind sorts failure lines: 'watchdog' (the patch force-failed it), 'abort' (AbortReq,
-- client disconnect, decode-side abort notification), 'propagated' (another TP rank's failure,
-- no reason of its own), 'failure' (timeouts, session/transport errors, lost connection).
-- pdf_room_lines(false) is room_events; pdf_room_lines(true) its failure, abort and watchdog lines
-- alone (room_facts' second pass), read with one equality test per event: an IN list is not
-- pushed into the scan, and these lines are few among millions.
CREATE OR REPLACE MACRO pdf_room_lines(rare_only) AS TABLE
WITH c AS MATERIALIZED (SELECT host_offsets, abort_rooms, start_given, end_given, end_t FROM context),
o AS (SELECT unnest(host_offsets, recursive := true) FROM c),
ar AS (SELECT unnest(abort_rooms, recursive := true) FROM c),
src AS NOT MATERIALIZED (
    SELECT * FROM events WHERE NOT rare_only
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'request_finished' AND finish_type = 'abort'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'prefill_bootstrap_failed'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'prefill_transfer_failed'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'decode_handshake_failed'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'decode_transfer_failed'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'transfer_error'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'watchdog_fired'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'abort_request'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'decode_watchdog_fired'
    UNION ALL SELECT * FROM events WHERE rare_only AND event = 'retract_abort'
),
e AS (
    SELECT x.* REPLACE (coalesce(x.host, '') AS host), o.offset_us
    FROM src AS x
    JOIN o ON o.host = coalesce(x.host, '') AND x.ts_us >= o.lo_us AND x.ts_us <= o.hi_us
    WHERE x.bootstrap_room IS NOT NULL
    UNION ALL
    SELECT x.* REPLACE (coalesce(x.host, '') AS host, ar.room AS bootstrap_room), o.offset_us
    FROM src AS x
    JOIN ar ON ar.line_id = x.line_id
    JOIN o ON o.host = coalesce(x.host, '') AND x.ts_us >= o.lo_us AND x.ts_us <= o.hi_us
    WHERE x.event IN ('abort_request', 'retract_abort') AND x.bootstrap_room IS NULL
    UNION ALL
    -- lines with no time at all (pasted without their prefix): somewhere in the data, so placed
    -- at its end, unless the user asked for a window
    SELECT x.* REPLACE (coalesce(x.host, '') AS host, c.end_t AS ts_us), 0
    FROM src AS x, c
    WHERE x.ts_us IS NULL AND x.bootstrap_room IS NOT NULL AND NOT (c.start_given OR c.end_given)
)
SELECT
    e.*,
    e.ts_us - e.offset_us AS t_us,
    CASE
        -- the lines most requests have first: CASE tries the later branches on the rest only
        WHEN e.event = 'request_received' OR e.event = 'req_time_stats' THEN NULL
        WHEN e.event = 'request_finished' AND coalesce(e.finish_type, '') <> 'abort' THEN NULL
        WHEN e.event NOT IN (
            'prefill_bootstrap_failed', 'prefill_transfer_failed', 'decode_handshake_failed',
            'decode_transfer_failed', 'transfer_error', 'request_finished', 'watchdog_fired', 'abort_request',
            'decode_watchdog_fired', 'retract_abort'
        ) THEN NULL
        -- a decode retraction's abort is its own outcome: neither a race nor a pin
        WHEN e.event = 'retract_abort' THEN 'retract'
        -- SGLang's own timeouts (bootstrap, waiting, MORI's SLA, ...) are not the watchdog
        WHEN e.timeout_kind IS NOT NULL THEN 'failure'
        WHEN e.event IN ('watchdog_fired', 'decode_watchdog_fired') OR e.reason ILIKE '%inflight watchdog%' THEN 'watchdog'
        WHEN e.event = 'abort_request' THEN 'abort'
        WHEN e.reason ILIKE '%unknown reason from another rank%' THEN 'propagated'
        WHEN e.reason ILIKE '%abort%' THEN 'abort'
        -- a Finish line with finish_reason type 'abort' and no message is still an abort
        WHEN e.event = 'request_finished' AND e.reason IS NULL THEN 'abort'
        ELSE 'failure'
    END AS reason_kind
FROM e
WHERE e.bootstrap_room <> 0
  AND coalesce(e.bootstrap_host, '') <> '2.2.2.2'
  AND NOT starts_with(coalesce(e.rid, ''), 'HEALTH_CHECK');

CREATE OR REPLACE VIEW room_events AS
SELECT * FROM pdf_room_lines(false);

-- The prefill `Prefill batch` samples: floor = #inflight-req - #new-seq (pdf_floor), per
-- stats-logging rank and prefill incarnation. `host_gauge` summarises them.
CREATE OR REPLACE VIEW inflight_gauge AS
WITH c AS MATERIALIZED (SELECT host_offsets, incarnations FROM context),
o AS (SELECT unnest(host_offsets, recursive := true) FROM c),
i AS (SELECT x.host, x.incarnation, x.start_us FROM (SELECT unnest(incarnations, recursive := true) FROM c) AS x
      WHERE x.engine = 'prefill'),
g AS (
    SELECT coalesce(e.host, '') AS host, coalesce(e.dp_rank, -1) AS dp_rank, coalesce(e.tp_rank, -1) AS tp_rank,
        e.line_id, e.ts_us, e.ts_us - o.offset_us AS t_us,
        e.new_seq, e.inflight_req, e.bootstrap_req, e.queue_req, e.running_req,
        pdf_floor(e.inflight_req, e.new_seq, e.entry) AS floor
    FROM events AS e
    JOIN o ON o.host = coalesce(e.host, '') AND e.ts_us >= o.lo_us AND e.ts_us <= o.hi_us
    WHERE e.event = 'prefill_stats' AND e.engine = 'prefill' AND e.inflight_req IS NOT NULL
)
SELECT g.*, coalesce(i.incarnation, 1) AS incarnation
FROM g ASOF LEFT JOIN i ON i.host = g.host AND g.ts_us >= i.start_us;
