-- The context every rule needs, computed once, as one row: the window on the reference clock,
-- per-host clock offsets, the watchdog's deployment and timeout, engine incarnations and
-- restarts, holes, the prefill inflight gauge per host, and what each engine logged.
-- Lists of structs hold the per-host/per-engine facts; the views in 02_context_views.sql
-- unnest them (host_offsets, settings, watchdog, incarnations, engine_restarts, holes, ...).

-- The inflight queue without the batch just run: from 0.5.9 `Prefill batch` is printed after the
-- batch joined the inflight queue, so floor = #inflight-req - #new-seq; up to 0.5.8 it is printed
-- when the batch is scheduled, before it joins, so floor = #inflight-req. `entry` is the catalog
-- entry that parsed the line (pdforensics/catalog/sglang.toml names them by version).
CREATE OR REPLACE MACRO pdf_floor(inflight_req, new_seq, entry) AS
    CASE WHEN entry IN ('prefill_batch_056', 'prefill_batch_053', 'prefill_batch_0410', 'prefill_batch_046')
         THEN greatest(inflight_req, 0)
         ELSE greatest(inflight_req - coalesce(new_seq, 0), 0) END;

-- A prefill batch line that shows its rank holding nothing at all: no earlier batch in flight
-- (`floor`, pdf_floor), nobody bootstrapping or waiting. A request that rank held had left by then.
CREATE OR REPLACE MACRO pdf_nothing_held(floor, bootstrap_req, queue_req) AS
    floor = 0 AND coalesce(bootstrap_req, 0) = 0 AND coalesce(queue_req, 0) = 0;

CREATE OR REPLACE VIEW context AS
WITH
w AS MATERIALIZED (
    -- ctx_us: how far before the window lines are read as context (see time_window)
    SELECT *, (coalesce(context_s, greatest(900, 3 * (coalesce(operator_timeout_s, default_timeout_s) + grace_s))) * 1e6)::BIGINT
        AS ctx_us
    FROM time_window
),

-- ---------------------------------------------------------------------------------- clocks
-- Each host's offset from the reference clock (the prefill host with the most requests) comes
-- from pairs of events that must be simultaneous or ordered:
--   * the router dispatches a request to prefill and decode at once, so the two `Receive:` lines
--     of a room are simultaneous, and so are the two ReqTimeStats `entry_time`s (each engine's
--     queue entry, on its own wall clock): offset = median(decode - prefill);
--   * the decode cannot finish before the prefill sent the KV:
--     offset <= min(decode Finish/ReqTimeStats line - prefill Finish/ReqTimeStats line).
-- Hosts with no such pairs (routers, lone engines) keep offset 0 ('assumed').
received_lines AS MATERIALIZED (
    SELECT count(*) AS n FROM events WHERE event IN ('request_received', 'req_time_stats')
),
legs AS MATERIALIZED (
    -- a median needs no more than ~25,000 requests: with more, a fixed sample of rooms (by room
    -- number, so both engines' lines of a sampled room are kept)
    SELECT e.bootstrap_room AS room, e.engine, coalesce(e.host, '') AS host, e.event, e.ts_us, e.rid, e.entry_time_us
    FROM events AS e, (SELECT CASE WHEN n <= 50000 THEN 1 ELSE n // 25000 END::UBIGINT AS m FROM received_lines) AS nr, w
    -- the sample first (a modulus of 1 keeps every room): CASE tests the rest on the kept lines only
    WHERE CASE WHEN e.bootstrap_room % nr.m = 0 THEN
        e.event IN ('request_received', 'request_finished', 'req_time_stats') AND e.engine IN ('prefill', 'decode')
        AND e.bootstrap_room <> 0
        AND coalesce(e.bootstrap_host, '') <> '2.2.2.2'
        AND NOT (e.event = 'request_finished' AND coalesce(e.finish_type, '') = 'abort')
        -- the exact per-host window needs the offsets: take ten minutes of slack on each side here
        AND e.ts_us >= w.start_us - w.ctx_us - 600000000 AND e.ts_us <= w.end_us + 600000000
        ELSE false END
),
recv AS MATERIALIZED (
    -- arrival per room, engine and host: its Receive line, else its time stats' entry_time (L2)
    SELECT room, engine, host,
        coalesce(min(ts_us) FILTER (WHERE event = 'request_received'), min(entry_time_us)) AS recv_us,
        bool_or(event = 'request_received') AS by_line
    FROM legs WHERE event = 'request_received' OR (event = 'req_time_stats' AND entry_time_us IS NOT NULL)
    GROUP BY room, engine, host
),
shared_rooms AS MATERIALIZED (
    -- a room two hosts of one engine logged (two deployments numbering rooms alike): which of its
    -- lines were simultaneous is not known, so it places no clock
    SELECT DISTINCT room FROM recv GROUP BY room, engine HAVING count(*) > 1
),
done AS (
    SELECT room, engine, min(ts_us) AS done_us FROM legs
    WHERE event IN ('request_finished', 'req_time_stats') GROUP BY ALL
),
ref AS MATERIALIZED (
    SELECT host FROM recv WHERE engine = 'prefill'
    GROUP BY host ORDER BY count(*) DESC, host LIMIT 1
),
ref_offset AS (SELECT host, 0::BIGINT AS offset_us FROM ref),
pairs AS MATERIALIZED (
    SELECT p.room, p.host AS p_host, d.host AS d_host, d.recv_us - p.recv_us AS recv_diff
    FROM recv AS p JOIN recv AS d ON d.room = p.room AND d.by_line = p.by_line
    WHERE p.engine = 'prefill' AND d.engine = 'decode' AND p.room NOT IN (SELECT room FROM shared_rooms)
),
finish_pairs AS (
    SELECT p.room, d.done_us - p.done_us AS done_diff
    FROM done AS p JOIN done AS d ON d.room = p.room
    WHERE p.engine = 'prefill' AND d.engine = 'decode'
),
decode_hosts AS MATERIALIZED (
    SELECT x.d_host AS host, least(median(x.recv_diff), min(f.done_diff))::BIGINT AS offset_us, count(*) AS pairs
    FROM pairs AS x
    JOIN ref ON x.p_host = ref.host
    LEFT JOIN finish_pairs AS f ON f.room = x.room
    WHERE x.d_host <> x.p_host
    GROUP BY x.d_host
),
other_prefill AS MATERIALIZED (
    -- other prefill hosts, through the decode hosts already placed on the reference clock
    SELECT x.p_host AS host, median(d.offset_us - x.recv_diff)::BIGINT AS offset_us, count(*) AS pairs
    FROM pairs AS x JOIN decode_hosts AS d ON d.host = x.d_host
    WHERE x.p_host NOT IN (SELECT host FROM ref) AND x.p_host NOT IN (SELECT host FROM decode_hosts)
    GROUP BY x.p_host
),
-- A fleet: a router pairs every prefill with several decodes, so a decode the reference prefill
-- never sent to is placed through the prefills placed so far, and so on, two more rounds (any
-- host within six pairings of the reference; a host further off keeps offset 0, 'assumed').
prefill_1 AS MATERIALIZED (SELECT host, offset_us FROM ref_offset UNION ALL SELECT host, offset_us FROM other_prefill),
decode_2 AS MATERIALIZED (
    SELECT x.d_host AS host, least(median(x.recv_diff + p.offset_us), min(f.done_diff + p.offset_us))::BIGINT AS offset_us,
        count(*) AS pairs
    FROM pairs AS x JOIN prefill_1 AS p ON p.host = x.p_host LEFT JOIN finish_pairs AS f ON f.room = x.room
    WHERE x.d_host <> x.p_host AND x.d_host NOT IN (SELECT host FROM decode_hosts) AND x.d_host NOT IN (SELECT host FROM prefill_1)
    GROUP BY x.d_host
),
prefill_2 AS MATERIALIZED (
    SELECT x.p_host AS host, median(d.offset_us - x.recv_diff)::BIGINT AS offset_us, count(*) AS pairs
    FROM pairs AS x JOIN decode_2 AS d ON d.host = x.d_host
    WHERE x.p_host NOT IN (SELECT host FROM prefill_1) AND x.p_host NOT IN (SELECT host FROM decode_hosts)
      AND x.p_host NOT IN (SELECT host FROM decode_2)
    GROUP BY x.p_host
),
decode_3 AS MATERIALIZED (
    SELECT x.d_host AS host, least(median(x.recv_diff + p.offset_us), min(f.done_diff + p.offset_us))::BIGINT AS offset_us,
        count(*) AS pairs
    FROM pairs AS x JOIN prefill_2 AS p ON p.host = x.p_host LEFT JOIN finish_pairs AS f ON f.room = x.room
    WHERE x.d_host <> x.p_host AND x.d_host NOT IN (SELECT host FROM decode_hosts) AND x.d_host NOT IN (SELECT host FROM decode_2)
      AND x.d_host NOT IN (SELECT host FROM prefill_1) AND x.d_host NOT IN (SELECT host FROM prefill_2)
    GROUP BY x.d_host
),
prefill_3 AS MATERIALIZED (
    SELECT x.p_host AS host, median(d.offset_us - x.recv_diff)::BIGINT AS offset_us, count(*) AS pairs
    FROM pairs AS x JOIN decode_3 AS d ON d.host = x.d_host
    WHERE x.p_host NOT IN (SELECT host FROM prefill_1) AND x.p_host NOT IN (SELECT host FROM prefill_2)
      AND x.p_host NOT IN (SELECT host FROM decode_hosts) AND x.p_host NOT IN (SELECT host FROM decode_2)
      AND x.p_host NOT IN (SELECT host FROM decode_3)
    GROUP BY x.p_host
),
placed AS MATERIALIZED (
    SELECT host, 0::BIGINT AS offset_us, NULL::BIGINT AS pairs, 'reference' AS method FROM ref
    UNION ALL
    SELECT host, offset_us, pairs, 'receive pairs' FROM decode_hosts
    UNION ALL
    SELECT host, offset_us, pairs, 'receive pairs via decode' FROM other_prefill
    UNION ALL
    SELECT host, offset_us, pairs, 'receive pairs via prefill' FROM decode_2
    UNION ALL
    SELECT host, offset_us, pairs, 'receive pairs via decode' FROM prefill_2
    UNION ALL
    SELECT host, offset_us, pairs, 'receive pairs via prefill' FROM decode_3
    UNION ALL
    SELECT host, offset_us, pairs, 'receive pairs via decode' FROM prefill_3
),
host_lines AS MATERIALIZED (
    -- first/last: the host's lines in the window (with 10 minutes of slack for its offset); the
    -- context before it only widens what is read, never where a window of the data starts. last:
    -- never before what its sources were read to (source_stats.read_to_us), lines lost since or not
    SELECT x.host, x.first_us, greatest(x.last_us, r.read_to_us) AS last_us, x.n_lines
    FROM (
        SELECT coalesce(l.host, '') AS host,
            coalesce(min(l.ts_us) FILTER (WHERE l.ts_us >= w.start_us - 600000000), min(l.ts_us)) AS first_us,
            max(l.ts_us) AS last_us,
            count(*) FILTER (WHERE l.ts_us >= w.start_us - 600000000) AS n_lines
        FROM lines AS l, w
        WHERE l.ts_us >= w.start_us - w.ctx_us - 600000000 AND l.ts_us <= w.end_us + 600000000
        GROUP BY 1
    ) AS x
    LEFT JOIN (
        SELECT coalesce(st.host, '') AS host, max(st.read_to_us) AS read_to_us
        FROM source_stats AS st, w
        WHERE st.read_to_us >= w.start_us - w.ctx_us - 600000000 AND st.read_to_us <= w.end_us
        GROUP BY 1
    ) AS r USING (host)
),
offsets AS MATERIALIZED (
    SELECT h.host, coalesce(pl.offset_us, 0) AS offset_us, pl.pairs, coalesce(pl.method, 'assumed') AS method,
        h.first_us - coalesce(pl.offset_us, 0) AS first_t, h.last_us - coalesce(pl.offset_us, 0) AS last_t, h.n_lines
    FROM host_lines AS h LEFT JOIN placed AS pl USING (host)
),
-- The window on the reference clock: given bounds are true time; a data span ends where the
-- last host's lines end, once each host is moved onto the reference clock.
clock0 AS (
    SELECT
        CASE WHEN any_value(w.start_given) THEN any_value(w.start_us)
             ELSE coalesce(min(o.first_t) FILTER (WHERE o.n_lines > 0), any_value(w.start_us)) END AS start_t,
        CASE WHEN any_value(w.end_given) THEN any_value(w.end_us)
             ELSE coalesce(max(o.last_t), any_value(w.end_us)) END AS end_t,
        any_value(w.ctx_us) AS ctx_us
    FROM w LEFT JOIN offsets AS o ON true
),
clock AS MATERIALIZED (
    -- never an inverted window (a start given after the data)
    SELECT start_t, greatest(end_t, start_t) AS end_t, start_t - ctx_us AS ctx_start_t FROM clock0
),
-- The lines read, on each host's own clock: the window and the context before it. Every later
-- step keeps a line when lo_us <= ts_us <= hi_us; what is judged is cut to the window (start_t)
-- where it is judged (requests, holes, restarts, storms).
hw AS MATERIALIZED (
    SELECT o.host, o.offset_us, clock.ctx_start_t + o.offset_us AS lo_us, clock.end_t + o.offset_us AS hi_us,
        clock.start_t + o.offset_us AS window_lo_us
    FROM offsets AS o, clock
),
-- All hosts' windows at once: aggregates over every line (counts, seconds, identities) use this
-- cheaper bound; only per-line facts use the exact per-host window (hw).
gb AS MATERIALIZED (SELECT min(lo_us) AS lo_us, max(hi_us) AS hi_us FROM hw),
-- One pass over the window's lines per host, engine, second and process identity (invocation id,
-- else PID): incarnations (ident, anon_lines), the seconds each engine logged in (seconds) and
-- what each engine logged (logged) are sums of it. own: a line of the engine's own process, not
-- systemd's or journald's line about its unit.
-- Seconds come from `line_seconds` / `event_seconds`, folded at ingest (fold.py groups the lines
-- as below, per batch), unless the window cuts one of them (a folded group with lines on both
-- sides of a window edge): those seconds, and every line stored after the fold
-- (meta.folded_upto), are grouped here from the lines.
folded AS MATERIALIZED (FROM pdf_folded_upto()),
cut AS MATERIALIZED (
    SELECT DISTINCT s.sec FROM line_seconds AS s, gb
    WHERE s.hi_us >= gb.lo_us AND s.lo_us <= gb.hi_us AND (s.lo_us < gb.lo_us OR s.hi_us > gb.hi_us)
),
unfolded AS (
    -- two plain filters, not one OR: each reaches the scan (no line passes both)
    SELECT l.* FROM lines AS l, folded WHERE l.line_id > folded.line_id
    UNION ALL
    SELECT l.* FROM lines AS l, folded WHERE l.line_id <= folded.line_id AND l.ts_us // 1000000 IN (SELECT sec FROM cut)
),
line_secs AS MATERIALIZED (
    SELECT host, engine, sec, invocation_id, pid, own, min(lo_us) AS lo_us, max(hi_us) AS hi_us,
        sum(n_lines)::BIGINT AS n_lines, sum(n_recognised)::BIGINT AS n_recognised,
        sum(n_parse_errors)::BIGINT AS n_parse_errors, sum(n_other_lines)::BIGINT AS n_other_lines,
        sum(n_continuation)::BIGINT AS n_continuation
    FROM (
        SELECT s.* FROM line_seconds AS s, gb
        WHERE s.lo_us >= gb.lo_us AND s.hi_us <= gb.hi_us AND s.sec NOT IN (SELECT sec FROM cut)
        UNION ALL BY NAME
        SELECT coalesce(l.host, '') AS host, l.engine, l.ts_us // 1000000 AS sec,
            l.invocation_id, CASE WHEN l.invocation_id IS NULL THEN l.pid END AS pid,
            -- the cheap tests first: CASE tries the string lists only on lines that carry a process id
            CASE
                WHEN l.invocation_id IS NULL AND l.pid IS NULL THEN false
                WHEN l.pid = 1 THEN false
                WHEN l.syslog_identifier IN ('systemd', 'systemd-journald', 'init') THEN false
                WHEN l.event IN ('unit_started', 'unit_stopping', 'unit_stopped', 'unit_killed', 'unit_failed',
                                 'journal_suppressed') THEN false
                ELSE true
            END AS own,
            min(l.ts_us) AS lo_us, max(l.ts_us) AS hi_us, count(*) AS n_lines,
            count(*) FILTER (WHERE l.event IS NOT NULL) AS n_recognised,
            count(*) FILTER (WHERE l.parse_error IS NOT NULL) AS n_parse_errors,
            count(*) FILTER (WHERE l.event IS NULL AND l.parse_error IS NULL AND l.cont_of IS NULL) AS n_other_lines,
            count(*) FILTER (WHERE l.cont_of IS NOT NULL) AS n_continuation
        FROM unfolded AS l JOIN gb ON l.ts_us >= gb.lo_us AND l.ts_us <= gb.hi_us
        GROUP BY ALL
    )
    GROUP BY ALL
),
-- The same for the window's events, per host, engine, event and second: evidence levels, requests
-- received per second, the prefill's last evidence (`event_seconds`: in a second no window edge
-- cuts, a folded group is wholly inside or outside, so its last line tells).
event_secs AS MATERIALIZED (
    SELECT host, engine, event, sec, max(hi_us) AS hi_us, sum(n_received)::BIGINT AS n_received
    FROM (
        SELECT s.* FROM event_seconds AS s, gb
        WHERE s.hi_us >= gb.lo_us AND s.hi_us <= gb.hi_us AND s.sec NOT IN (SELECT sec FROM cut)
        UNION ALL BY NAME
        SELECT coalesce(e.host, '') AS host, e.engine, e.event, e.ts_us // 1000000 AS sec,
            max(e.ts_us) AS hi_us,
            -- health checks go to one engine only: not requests
            count(*) FILTER (WHERE e.event = 'request_received' AND e.bootstrap_room <> 0
                               AND coalesce(e.bootstrap_host, '') <> '2.2.2.2') AS n_received
        FROM (
            SELECT e.* FROM events AS e, folded WHERE e.line_id > folded.line_id
            UNION ALL
            SELECT e.* FROM events AS e, folded
            WHERE e.line_id <= folded.line_id AND e.ts_us // 1000000 IN (SELECT sec FROM cut)
        ) AS e
        JOIN gb ON e.ts_us >= gb.lo_us AND e.ts_us <= gb.hi_us
        GROUP BY ALL
    )
    GROUP BY ALL
),

-- -------------------------------------------------------------------------------- watchdog
-- The patch prints `inflight watchdog armed: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT=Ns` once per
-- scheduler process at start; lines before the window count (the prefill may have started long
-- before it). A prefill start in the data without that line means an old build.
armed AS (
    SELECT count(*) AS n, arg_max(e.timeout_s, e.ts_us) AS timeout_s, max(e.ts_us) AS last_us
    FROM events AS e JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us <= hw.hi_us
    WHERE e.event = 'watchdog_armed'
),
fired AS (
    SELECT count(*) AS n, max(e.timeout_s) AS timeout_s
    FROM events AS e JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
    WHERE e.event = 'watchdog_fired'
),
prefill_starts AS (
    SELECT count(*) AS n FROM events AS e JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us <= hw.hi_us
    WHERE e.engine = 'prefill' AND e.event IN ('server_args', 'server_ready', 'unit_started')
),
st AS MATERIALIZED (
    SELECT
        CASE
            WHEN w.operator_deployed IS NOT NULL THEN w.operator_deployed
            WHEN armed.n > 0 OR fired.n > 0 THEN true
            WHEN prefill_starts.n > 0 THEN false
            WHEN w.env_timeout_s IS NOT NULL THEN true
        END AS deployed,
        -- which evidence says so: SGLang's own watchdogs (`Watchdog TokenizerManager initialized.`,
        -- `Scheduler watchdog timeout`) are other mechanisms and never count
        CASE
            WHEN w.operator_deployed IS NOT NULL THEN 'operator'
            WHEN armed.n > 0 THEN 'armed line'
            WHEN fired.n > 0 THEN 'firing lines'
            WHEN prefill_starts.n > 0 THEN 'the prefill started without the armed line'
            WHEN w.env_timeout_s IS NOT NULL
                THEN format('the unit environment of {} sets {} s; no armed line in the data proves it armed', w.env_unit, w.env_timeout_s)
            WHEN w.operator_timeout_s IS NOT NULL THEN 'no armed line in the data; the operator stated a timeout'
            ELSE 'no armed line and no prefill start in the data'
        END AS deployed_basis,
        coalesce(w.operator_timeout_s, armed.timeout_s, w.env_timeout_s, fired.timeout_s, w.fleet_timeout_s, w.default_timeout_s)
            AS timeout_s,
        CASE
            WHEN w.operator_timeout_s IS NOT NULL THEN 'the operator: --watchdog-timeout'
            WHEN armed.timeout_s IS NOT NULL THEN 'armed line'
            WHEN w.env_timeout_s IS NOT NULL THEN 'unit environment'
            WHEN fired.timeout_s IS NOT NULL THEN 'firing lines'
            WHEN w.fleet_timeout_s IS NOT NULL THEN 'fleet: ' || coalesce(w.fleet_timeout_basis, 'other instances')
            ELSE 'default'
        END AS timeout_source,
        armed.n AS armed_lines, armed.last_us AS armed_at_us, fired.n AS firing_lines,
        w.grace_s, w.start_us, w.end_us, w.start_given, w.end_given, clock.start_t, clock.end_t,
        clock.ctx_start_t, w.window_basis, w.window_runs, w.data_start_us, w.data_end_us,
        (w.suppress_interval_s * 1e6)::BIGINT AS suppress_us,
        w.storm_min_aborts, (w.storm_gap_s * 1e6)::BIGINT AS storm_gap_us
    FROM w, armed, fired, prefill_starts, clock
),
s AS MATERIALIZED (
    -- stuck_us = timeout + grace: a request held longer than that with no watchdog line is one the
    -- watchdog should have released
    SELECT *, (timeout_s * 1e6)::BIGINT AS timeout_us, ((timeout_s + grace_s) * 1e6)::BIGINT AS stuck_us FROM st
),

-- ---------------------------------------------------------------------- engine incarnations
-- An incarnation is one run of an engine process on a host. Journal lines name it (invocation
-- id, else PID); plain files do not, so there startup lines mark it (`server_args=...`, or `fired
-- up and ready to roll` after a SIGTERM / `Gracefully exiting`). systemd's own lines about the
-- unit (pid 1) and journald's are markers, not the engine's process.
life AS MATERIALIZED (
    SELECT coalesce(l.host, '') AS host, l.engine, l.ts_us, l.event, l.pid, l.invocation_id, l.line_id,
        l.event IN ('sigterm', 'graceful_exit', 'unit_stopping', 'unit_stopped', 'unit_killed', 'unit_failed',
                    'engine_died', 'unit_exited') AS is_stop,
        -- the process died rather than stopped: a crash, a fatal signal, SGLang's own watchdogs,
        -- an exit with a failure status
        l.event IN ('engine_died', 'unit_killed', 'unit_failed')
            OR (l.event = 'unit_exited' AND NOT l.message LIKE '%status=0/SUCCESS%') AS is_death
    FROM lines AS l JOIN gb ON l.ts_us >= gb.lo_us AND l.ts_us <= gb.hi_us
    WHERE l.engine IN ('prefill', 'decode')
      AND l.event IN ('server_args', 'server_ready', 'unit_started', 'sigterm', 'graceful_exit',
                      'unit_stopping', 'unit_stopped', 'unit_killed', 'unit_failed', 'engine_died', 'unit_exited')
),
ident AS (
    SELECT host, engine, coalesce(invocation_id, pid::VARCHAR) AS identity, min(lo_us) AS first_us, max(hi_us) AS last_us
    FROM line_secs
    WHERE engine IN ('prefill', 'decode') AND own
    GROUP BY ALL
),
islands AS (
    -- identities that overlap in time (TP-rank subprocesses with their own PIDs) are one
    -- incarnation; a new one starts when an identity begins after every earlier one has ended
    SELECT *,
        coalesce(first_us > max(last_us) OVER (
            PARTITION BY host, engine ORDER BY first_us, last_us
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS starts_new
    FROM ident
),
numbered AS (
    SELECT *, sum(starts_new::INTEGER) OVER (PARTITION BY host, engine ORDER BY first_us, last_us) AS k
    FROM islands
),
by_identity AS (
    SELECT host, engine, min(first_us) AS start_us, string_agg(identity, ',' ORDER BY first_us) AS identity,
        'new process' AS started_by
    FROM numbered GROUP BY host, engine, k
),
anon_lines AS (
    SELECT host, engine, min(lo_us) AS start_us
    FROM line_secs
    WHERE engine IN ('prefill', 'decode') AND invocation_id IS NULL AND pid IS NULL
    GROUP BY ALL
),
anon_marks AS (
    SELECT *, lag(event) OVER (PARTITION BY host, engine ORDER BY ts_us, line_id) AS prev_event
    FROM life WHERE pid IS NULL AND invocation_id IS NULL
),
anon_starts AS (
    -- without process ids, a startup after an earlier lifecycle line is a new process
    SELECT host, engine, ts_us AS start_us, NULL AS identity, 'startup line' AS started_by
    FROM anon_marks
    WHERE (event = 'server_args' AND prev_event IS NOT NULL)
       OR (event = 'server_ready' AND prev_event IN ('sigterm', 'graceful_exit', 'server_ready'))
    UNION ALL
    SELECT host, engine, start_us, NULL, 'first line' FROM anon_lines
),
all_starts AS (
    SELECT host, engine, start_us, identity, started_by FROM by_identity
    UNION ALL
    SELECT DISTINCT ON (host, engine, start_us) host, engine, start_us, identity, started_by FROM anon_starts
),
spans AS MATERIALIZED (
    SELECT *, row_number() OVER wi AS incarnation, lead(start_us) OVER wi AS next_start_us
    FROM all_starts
    WINDOW wi AS (PARTITION BY host, engine ORDER BY start_us)
),
seconds AS MATERIALIZED (
    -- seconds in which each engine host logged anything: cheap to scan for ends and gaps
    SELECT host, engine, sec, min(lo_us) AS lo_us, max(hi_us) AS hi_us, sum(n_lines)::BIGINT AS n_lines
    FROM line_secs
    WHERE engine IN ('prefill', 'decode')
    GROUP BY ALL
),
marks AS (
    SELECT sp.host, sp.engine, sp.incarnation,
        min(m.ts_us) FILTER (WHERE m.event = 'server_ready') AS ready_us,
        min(m.ts_us) FILTER (WHERE m.is_stop) AS stop_us,
        -- a death that ends a stop already under way (systemd killing a process that ignored
        -- SIGTERM) is part of that stop; one with no stop before it is a crash
        CASE WHEN min(m.ts_us) FILTER (WHERE m.is_death)
                  <= coalesce(min(m.ts_us) FILTER (WHERE m.is_stop AND NOT m.is_death), 9223372036854775807)
             THEN min(m.ts_us) FILTER (WHERE m.is_death) END AS died_us
    FROM spans AS sp
    JOIN life AS m ON m.host = sp.host AND m.engine = sp.engine
     AND m.ts_us >= sp.start_us AND m.ts_us < coalesce(sp.next_start_us, 9223372036854775807)
    GROUP BY ALL
),
last_lines AS (
    SELECT sp.host, sp.engine, sp.incarnation, max(x.hi_us) AS last_us
    FROM spans AS sp
    JOIN seconds AS x ON x.host = sp.host AND x.engine = sp.engine
     AND x.hi_us >= sp.start_us AND x.hi_us < coalesce(sp.next_start_us, 9223372036854775807)
    GROUP BY ALL
),
inc AS MATERIALIZED (
    SELECT
        sp.host, sp.engine, sp.incarnation, sp.identity, sp.started_by,
        sp.start_us, sp.next_start_us, m.ready_us, m.stop_us, l.last_us, m.died_us,
        sp.start_us - coalesce(o.offset_us, 0) AS start_t,
        m.ready_us - coalesce(o.offset_us, 0) AS ready_t,
        m.stop_us - coalesce(o.offset_us, 0) AS stop_t,
        l.last_us - coalesce(o.offset_us, 0) AS last_t
    FROM spans AS sp
    LEFT JOIN marks AS m USING (host, engine, incarnation)
    LEFT JOIN last_lines AS l USING (host, engine, incarnation)
    LEFT JOIN offsets AS o ON o.host = sp.host
),
-- A restart: the old incarnation stopped (its first SIGTERM / Gracefully exiting / systemd stop,
-- else its last line) and the new one was up (fired up and ready to roll, else its first line).
-- gone_t is the old process's last line: requests it still held are gone from then on. An
-- engine that stopped and did not come back within the window is 'stopped', down to the end.
restarts AS MATERIALIZED (
    SELECT
        i.host, i.engine, 'restart' AS kind, prev.incarnation AS old_incarnation, i.incarnation AS new_incarnation,
        prev.identity AS old_identity, i.identity AS new_identity,
        coalesce(prev.stop_t, prev.last_t, i.start_t) AS stop_t,
        coalesce(prev.last_t, prev.stop_t, i.start_t) AS gone_t,
        coalesce(i.ready_t, i.start_t) AS up_t,
        CASE WHEN prev.died_us IS NOT NULL THEN 'died' WHEN prev.stop_t IS NOT NULL THEN 'stop line'
             ELSE 'new process without a stop line' END AS how
    FROM inc AS i
    JOIN inc AS prev ON prev.host = i.host AND prev.engine = i.engine AND prev.incarnation = i.incarnation - 1
    UNION ALL
    -- down from its last line: a process that keeps logging after a SIGTERM is still up
    SELECT host, engine, 'stopped', incarnation, NULL, identity, NULL,
        greatest(coalesce(last_t, stop_t), stop_t), greatest(coalesce(last_t, stop_t), stop_t), NULL,
        CASE WHEN died_us IS NOT NULL THEN 'died, no restart in the window' ELSE 'stop line, no restart in the window' END
    FROM inc WHERE next_start_us IS NULL AND stop_t IS NOT NULL
),

-- ------------------------------------------------------------------------------ the gauge
-- Prefill `#inflight-req` per stats-logging rank. Nothing is printed while no batch runs; on an
-- idle prefill a health check's 1-token batch is what shows the floor. A stream is one rank of
-- one prefill incarnation (a restart empties the queue). `inflight_gauge` lists the samples.
samples AS MATERIALIZED (
    SELECT g.*, coalesce(i.incarnation, 1) AS incarnation
    FROM (
        SELECT coalesce(e.host, '') AS host, coalesce(e.dp_rank, -1) AS dp_rank, coalesce(e.tp_rank, -1) AS tp_rank,
            e.line_id, e.ts_us, e.ts_us - coalesce(o.offset_us, 0) AS t_us,
            e.bootstrap_req, e.queue_req, pdf_floor(e.inflight_req, e.new_seq, e.entry) AS floor
        FROM events AS e
        JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
        LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
        WHERE e.event = 'prefill_stats' AND e.engine = 'prefill' AND e.inflight_req IS NOT NULL
    ) AS g
    ASOF LEFT JOIN (SELECT host, incarnation, start_us FROM inc WHERE engine = 'prefill') AS i
      ON i.host = g.host AND g.ts_us >= i.start_us
),
tails AS MATERIALIZED (
    -- tail_min(sample) = the lowest floor from that sample on: it only rises with time
    SELECT *,
        min(floor) OVER (
            PARTITION BY host, dp_rank, tp_rank, incarnation ORDER BY t_us, line_id
            ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS tail_min,
        max(t_us) OVER (PARTITION BY host, dp_rank, tp_rank, incarnation) AS stream_last_t
    FROM samples
),
levels AS MATERIALIZED (
    -- pinned_floor = tail_min at the last sample a full timeout+grace before the stream's last
    -- sample: that many requests sat in the queue longer than the timeout
    SELECT t.host, t.dp_rank, t.tp_rank, t.incarnation,
        count(*) AS samples, min(t.t_us) AS first_t, max(t.t_us) AS last_t,
        arg_max(t.floor, t.t_us) AS last_floor, max(t.floor) AS peak_floor,
        max(t.t_us) FILTER (WHERE t.floor = 0) AS last_zero_t,
        max(t.t_us) FILTER (WHERE pdf_nothing_held(t.floor, t.bootstrap_req, t.queue_req)) AS last_empty_t,
        coalesce(max(t.tail_min) FILTER (WHERE t.t_us <= t.stream_last_t - s.stuck_us), 0) AS pinned_floor
    FROM tails AS t, s
    GROUP BY ALL
),
streams AS MATERIALIZED (
    -- pinned_since: when the floor rose to pinned_floor for good; open_floor/open_since: the final
    -- floor above that, not (yet) a full timeout old
    SELECT l.*,
        min(t.t_us) FILTER (WHERE t.tail_min >= l.pinned_floor AND l.pinned_floor > 0) AS pinned_since,
        l.last_floor - l.pinned_floor AS open_floor,
        min(t.t_us) FILTER (WHERE t.tail_min > l.pinned_floor) AS open_since
    FROM levels AS l JOIN tails AS t USING (host, dp_rank, tp_rank, incarnation)
    GROUP BY ALL
),
per_dp AS (
    -- duplicate TP-rank streams of one DP rank (--enable-metrics-for-all-schedulers) count once
    SELECT host, incarnation, dp_rank,
        max(pinned_floor) AS pinned_floor, min(pinned_since) AS pinned_since,
        max(open_floor) AS open_floor, min(open_since) AS open_since, max(last_floor) AS last_floor,
        max(last_zero_t) AS last_zero_t, max(last_empty_t) AS last_empty_t,
        max(last_t) AS last_t, min(first_t) AS first_t, sum(samples) AS samples, max(peak_floor) AS peak_floor
    FROM streams GROUP BY ALL
),
gauge AS MATERIALIZED (
    -- per prefill host and incarnation; DP ranks add up. last_zero_t / last_empty_t: by then every
    -- DP rank's inflight queue (resp. all its queues) had been seen empty at least once
    SELECT g.host, g.incarnation,
        sum(g.pinned_floor)::BIGINT AS pinned_floor, min(g.pinned_since) AS pinned_since,
        sum(g.open_floor)::BIGINT AS open_floor, min(g.open_since) AS open_since,
        sum(g.last_floor)::BIGINT AS last_floor,
        CASE WHEN count(g.last_zero_t) = count(*) THEN min(g.last_zero_t) END AS last_zero_t,
        CASE WHEN count(g.last_empty_t) = count(*) THEN min(g.last_empty_t) END AS last_empty_t,
        max(g.last_t) AS last_t, min(g.first_t) AS first_t, sum(g.samples)::BIGINT AS samples,
        sum(g.peak_floor)::BIGINT AS peak_floor,
        -- a stream ends with its incarnation: the process's last line if it restarted, else the window end
        coalesce(any_value(CASE WHEN i.next_start_us IS NOT NULL THEN i.last_t END), any_value(s.end_t)) AS stream_end_t
    FROM per_dp AS g
    CROSS JOIN s
    LEFT JOIN inc AS i ON i.host = g.host AND i.engine = 'prefill' AND i.incarnation = g.incarnation
    GROUP BY g.host, g.incarnation
),

-- ------------------------------------------------------------- evidence that changes mid-way
-- `Config logging: obj=ConfigureLoggingReq(...)` switches the request log (or the log level) at run
-- time: the request log of that host is then not the whole story, and what it proves (the
-- anonymous-pin refinement) holds only where it was on. Any switch from the context on counts.
logging_changes AS MATERIALIZED (
    SELECT coalesce(e.host, '') AS host, e.ts_us - coalesce(o.offset_us, 0) AS t_us, e.log_requests, e.log_level
    FROM events AS e
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE e.event = 'config_logging' AND (e.log_requests IS NOT NULL OR e.log_level IS NOT NULL)
),

-- ---------------------------------------------------------------- the other queues, per rank
-- Pins happen outside the prefill inflight queue too: a decode transfer or prealloc queue, the
-- bootstrap queue of one PP/DP rank, the prefill waiting queue. Each queue of each logging rank is
-- a stream of gauge samples. A stretch that never drops to zero for longer than timeout + grace
-- (at least 3 samples) and keeps returning to its lowest value (at least half its samples sit
-- there) has that lowest value frozen: something stuck the inflight watchdog does not cover, even
-- while other requests pass through above it. A saturated queue that moves (its lowest value
-- only now and then) is not frozen.
queue_samples AS (
    SELECT coalesce(e.host, '') AS host, e.engine, coalesce(e.dp_rank, -1) AS dp_rank, coalesce(e.tp_rank, -1) AS tp_rank,
        e.line_id, e.ts_us - coalesce(o.offset_us, 0) AS t_us, q.queue, q.value
    FROM events AS e
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    CROSS JOIN LATERAL (SELECT unnest([
        {'queue': 'bootstrap', 'value': e.bootstrap_req},
        {'queue': 'waiting', 'value': e.queue_req}
    ], recursive := true)) AS q
    WHERE e.event = 'prefill_stats' AND e.engine = 'prefill'
    UNION ALL
    SELECT coalesce(e.host, '') AS host, e.engine, coalesce(e.dp_rank, -1) AS dp_rank, coalesce(e.tp_rank, -1) AS tp_rank,
        e.line_id, e.ts_us - coalesce(o.offset_us, 0) AS t_us, q.queue, q.value
    FROM events AS e
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    CROSS JOIN LATERAL (SELECT unnest([
        {'queue': 'transfer', 'value': e.transfer_req},
        {'queue': 'prealloc', 'value': e.prealloc_req}
    ], recursive := true)) AS q
    WHERE e.event = 'decode_stats' AND e.engine = 'decode'
),
queue_islands AS (
    -- a stretch of non-zero samples per stream: islands numbered by the zeros before them
    SELECT *, sum(CASE WHEN value = 0 THEN 1 ELSE 0 END) OVER (
            PARTITION BY host, engine, queue, dp_rank, tp_rank ORDER BY t_us, line_id ROWS UNBOUNDED PRECEDING) AS island
    FROM queue_samples WHERE value IS NOT NULL
),
frozen AS MATERIALIZED (
    SELECT x.host, x.engine, x.queue, x.dp_rank, x.tp_rank, x.value, x.from_t, x.to_t, x.samples, x.sample_ts
    FROM (
        -- sample_ts: the stretch's sample times, where the verdict checks which requests held it
        SELECT host, engine, queue, dp_rank, tp_rank, island, min(value) AS value,
            min(t_us) AS from_t, max(t_us) AS to_t, count(*) AS samples, list(t_us ORDER BY t_us) AS sample_ts
        FROM queue_islands WHERE value > 0 GROUP BY ALL
    ) AS x
    JOIN (
        -- how many samples of the stretch sit at its lowest value
        SELECT q.host, q.engine, q.queue, q.dp_rank, q.tp_rank, q.island, count(*) AS at_floor
        FROM queue_islands AS q
        JOIN (SELECT host, engine, queue, dp_rank, tp_rank, island, min(value) AS lo
              FROM queue_islands WHERE value > 0 GROUP BY ALL) AS m
          USING (host, engine, queue, dp_rank, tp_rank, island)
        WHERE q.value = m.lo
        GROUP BY ALL
    ) AS f USING (host, engine, queue, dp_rank, tp_rank, island)
    CROSS JOIN s
    WHERE x.samples >= 3 AND x.to_t - x.from_t > s.stuck_us AND x.to_t >= s.start_t AND f.at_floor * 2 >= x.samples
),

-- ------------------------------------------------------------------------ what was logged
levels_seen AS MATERIALIZED (
    SELECT host, engine,
        CASE
            WHEN bool_or(event = 'abort_request') THEN 'L3'
            WHEN bool_or(event = 'req_time_stats') THEN 'L2'
            WHEN bool_or(event IN ('request_received', 'request_finished')) THEN 'L1'
            ELSE 'L0'
        END AS evidence_level
    FROM event_secs
    WHERE event IN ('abort_request', 'req_time_stats', 'request_received', 'request_finished', 'prefill_stats', 'decode_stats')
    GROUP BY ALL
),
logged AS MATERIALIZED (
    -- lines from other programs (shell helpers, library warnings, tracebacks) are counted, never holes
    SELECT host, engine,
        sum(n_lines)::BIGINT AS n_lines,
        sum(n_recognised)::BIGINT AS n_recognised,
        sum(n_parse_errors)::BIGINT AS n_parse_errors,
        sum(n_other_lines)::BIGINT AS n_other_lines,
        sum(n_continuation)::BIGINT AS n_continuation,
        min(lo_us) AS first_us, max(hi_us) AS last_us
    FROM line_secs
    GROUP BY ALL
),
coverage_by_engine AS MATERIALIZED (
    SELECT lg.*, coalesce(lv.evidence_level, 'L0') AS evidence_level
    FROM logged AS lg LEFT JOIN levels_seen AS lv USING (host, engine)
),

-- ---------------------------------------------------------------------------------- holes
-- Stretches where lines that matter may be missing or unreadable:
--   journald_suppression  journald dropped N lines of a unit (rate limit) in the interval before
--                         its `Suppressed N messages from UNIT` line
--   parse_error           recognised SGLang lines whose pattern failed (lines.parse_error), per minute
--   engine_down           between an engine's stop and its next start (or the window end)
--   engine_silent         an engine logged nothing for longer than timeout+grace while the other
--                         engine received new requests (or, at L0, ran batches): its lines are missing
-- A hole is `covered` when prefill evidence (a per-request line, a gauge sample, a terminal line)
-- exists a full timeout+grace after it: a request stuck in the hole would show there (a watchdog
-- line, a floor, an open request). prefill_silent is not lost lines: a prefill that fired printed
-- its line, so a silence the prefill comes back from (seen_after) hides no watchdog line; one that
-- lasts to the window end may hide a hung or dead prefill, and whatever it did.
suppressed AS (
    SELECT 'journald_suppression' AS kind, coalesce(e.host, '') AS host,
        CASE WHEN e.unit ILIKE '%prefill%' THEN 'prefill' WHEN e.unit ILIKE '%decode%' THEN 'decode' ELSE e.engine END AS engine,
        e.unit, e.ts_us - coalesce(o.offset_us, 0) - s.suppress_us AS from_t, e.ts_us - coalesce(o.offset_us, 0) AS to_t,
        e.count AS n,
        format('journald suppressed {} messages from {}', coalesce(e.count::VARCHAR, 'some'), coalesce(e.unit, '?')) AS detail,
        NULL::BOOLEAN AS seen_after
    FROM events AS e
    CROSS JOIN s
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE e.event = 'journal_suppressed'
),
parse_errors AS (
    SELECT 'parse_error' AS kind, x.host, x.engine, min(x.unit) AS unit,
        min(x.ts_us) - any_value(coalesce(o.offset_us, 0)) AS from_t,
        max(x.ts_us) - any_value(coalesce(o.offset_us, 0)) AS to_t,
        count(*) AS n,
        format('{} recognised SGLang line(s) failed to parse ({})', count(*), string_agg(DISTINCT x.parse_error, ', ')) AS detail,
        NULL::BOOLEAN AS seen_after
    FROM (
        SELECT coalesce(l.host, '') AS host, l.engine, l.unit, l.ts_us, l.parse_error
        FROM lines AS l JOIN gb ON l.ts_us >= gb.lo_us AND l.ts_us <= gb.hi_us
        WHERE l.parse_error IS NOT NULL
    ) AS x
    LEFT JOIN offsets AS o ON o.host = x.host
    GROUP BY x.host, x.engine, x.ts_us // 60000000
),
down AS (
    SELECT 'engine_down' AS kind, r.host, r.engine, NULL AS unit, r.stop_t AS from_t, coalesce(r.up_t, s.end_t) AS to_t,
        NULL::BIGINT AS n,
        CASE WHEN r.kind = 'restart' THEN
                 CASE r.how WHEN 'died' THEN r.engine || ' died and restarted'
                            WHEN 'stop line' THEN r.engine || ' stopped and restarted'
                            ELSE r.engine || ' restarted: a new process without a stop line' END
             ELSE format('{} stopped and did not come back in the window', r.engine) END AS detail,
        NULL::BOOLEAN AS seen_after
    FROM restarts AS r, s
),
received AS MATERIALIZED (
    -- requests received per second; health checks go to one engine only, so they do not count
    SELECT r.engine, (r.sec * 1000000 - coalesce(any_value(o.offset_us), 0)) // 1000000 AS sec, sum(r.n) AS n
    FROM (
        SELECT host, engine, sec, sum(n_received)::BIGINT AS n
        FROM event_secs
        WHERE event = 'request_received' AND n_received > 0
        GROUP BY ALL
    ) AS r
    LEFT JOIN offsets AS o USING (host)
    GROUP BY r.engine, r.sec, r.host
),
traffic AS (
    -- new requests per second and engine; at L0 (no request log) real batches stand in for them
    -- (a health check's batch is one token)
    SELECT engine, sec, n FROM received
    UNION ALL
    SELECT e.engine, (e.ts_us - coalesce(o.offset_us, 0)) // 1000000, count(*)
    FROM events AS e
    JOIN gb ON e.ts_us >= gb.lo_us AND e.ts_us <= gb.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE ((e.event = 'prefill_stats' AND coalesce(e.new_token, 2) > 1)
        OR (e.event = 'decode_stats' AND coalesce(e.running_req, 1) > 0))
      AND NOT EXISTS (SELECT 1 FROM received)
    GROUP BY ALL
),
activity AS MATERIALIZED (
    SELECT x.host, x.engine, x.lo_us - coalesce(o.offset_us, 0) AS lo_t, x.hi_us - coalesce(o.offset_us, 0) AS hi_t
    FROM seconds AS x LEFT JOIN offsets AS o USING (host)
),
gaps AS (
    SELECT host, engine, lag(hi_t) OVER (PARTITION BY host, engine ORDER BY lo_t) AS from_t, lo_t AS to_t
    FROM activity
    UNION ALL
    SELECT a.host, a.engine, any_value(s.start_t), min(a.lo_t) FROM activity AS a, s GROUP BY a.host, a.engine
    UNION ALL
    SELECT a.host, a.engine, max(a.hi_t), any_value(s.end_t) FROM activity AS a, s GROUP BY a.host, a.engine
    UNION ALL
    -- no prefill line at all in the window
    SELECT '', 'prefill', s.start_t, s.end_t FROM s
    WHERE NOT EXISTS (SELECT 1 FROM activity WHERE engine = 'prefill')
),
silent AS (
    SELECT 'engine_silent' AS kind, g.host, g.engine, NULL AS unit, g.from_t, g.to_t, sum(t.n)::BIGINT AS n,
        format('{} logged nothing for {:.0f} s while the other engine took {} new request(s) or batches',
               g.engine, (g.to_t - g.from_t) / 1e6, sum(t.n)::BIGINT) AS detail,
        NULL::BOOLEAN AS seen_after
    FROM gaps AS g
    CROSS JOIN s
    JOIN traffic AS t
      ON t.engine <> g.engine AND t.engine IN ('prefill', 'decode')
     -- a couple of seconds in from each end: the request that ends a silence is not inside it
     AND t.sec * 1000000 > g.from_t + 2000000 AND (t.sec + 1) * 1000000 < g.to_t - 2000000
    WHERE g.from_t IS NOT NULL AND g.to_t - g.from_t > s.stuck_us
    GROUP BY g.host, g.engine, g.from_t, g.to_t
),
-- The prefill's queues are observed by its batch lines (the gauge) and its request lines; a
-- stretch longer than timeout + grace with neither is a silence an open request or a non-zero
-- floor could hide in (a hung scheduler, logs not collected, or simply idle: the verdict decides
-- whether it matters). Stretches already named as silent-while-traffic-flowed or down are not
-- repeated.
-- Observation is per queue (design.md, "Observed"): a batch line observes the inflight queue only
-- when it carries `#inflight-req` (the gauge `samples`); one of a build whose line lacks the field
-- observes the running queue, not this one. Request lines observe it alongside the gauge, not in
-- its place: once the prefill's batch lines stop carrying the field (a restart onto a build, or a
-- catalog entry, without it) they count again only from the next line that carries it.
-- Batch lines that carry no `#inflight-req` (a build, or a catalog entry, without the field): the
-- prefill ran batches there, so requests entered a queue no line observed.
gaugeless AS MATERIALIZED (
    SELECT coalesce(e.host, '') AS host, e.ts_us - coalesce(o.offset_us, 0) AS t_us, e.entry
    FROM events AS e
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE e.event = 'prefill_stats' AND e.engine = 'prefill' AND e.inflight_req IS NULL
),
stat_lines AS (
    SELECT host, t_us, true AS carries FROM samples
    UNION ALL
    SELECT host, t_us, false FROM gaugeless
),
queue_seen AS MATERIALIZED (
    SELECT host, sec * 1000000 - any_value(off) AS lo_t, max(hi_us) - any_value(off) AS hi_t
    FROM (
        SELECT r.host, r.sec, r.hi_us, r.off
        FROM (
            SELECT e.host, e.sec, e.hi_us, coalesce(o.offset_us, 0) AS off, e.hi_us - coalesce(o.offset_us, 0) AS t_us
            FROM event_secs AS e
            LEFT JOIN offsets AS o ON o.host = e.host
            WHERE e.engine = 'prefill'
              AND e.event IN ('request_received', 'request_finished', 'req_time_stats',
                              'prefill_bootstrap_failed', 'prefill_transfer_failed', 'transfer_error',
                              'watchdog_fired', 'abort_request')
        ) AS r
        ASOF LEFT JOIN stat_lines AS k ON k.host = r.host AND k.t_us <= r.t_us
        WHERE coalesce(k.carries, true)
        UNION ALL
        SELECT x.host, x.ts_us // 1000000, x.ts_us, x.ts_us - x.t_us FROM samples AS x
    )
    GROUP BY host, sec
),
quiet_gaps AS (
    -- seen_after: the prefill showed its queues again at the silence's end (false: to the window end)
    SELECT host, lag(hi_t) OVER (PARTITION BY host ORDER BY lo_t) AS from_t, lo_t AS to_t, true AS seen_after
    FROM queue_seen
    UNION ALL
    SELECT q.host, any_value(s.start_t), min(q.lo_t), true FROM queue_seen AS q, s GROUP BY q.host
    UNION ALL
    SELECT q.host, max(q.hi_t), any_value(s.end_t), false FROM queue_seen AS q, s GROUP BY q.host
),
-- A death by SGLang's scheduler watchdog says the process hung that long first: that silence is
-- the hang it reports, not lost lines.
hangs AS (
    SELECT coalesce(e.host, '') AS host, e.ts_us - coalesce(o.offset_us, 0) AS t_us, (e.timeout_s * 1e6)::BIGINT AS hang_us
    FROM events AS e
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE e.event = 'engine_died' AND e.engine = 'prefill' AND e.timeout_s IS NOT NULL
),
downs_named AS (
    SELECT x.host, x.from_t, x.to_t, coalesce(max(h.hang_us), 0) AS hang_us
    FROM down AS x
    LEFT JOIN hangs AS h ON h.host = x.host AND h.t_us BETWEEN x.from_t - 10000000 AND x.to_t
    WHERE x.engine = 'prefill'
    GROUP BY ALL
),
-- n: the batch lines without the gauge inside the silence (the queue was in use, unobserved)
quiet AS (
    SELECT 'prefill_silent' AS kind, g.host, 'prefill' AS engine, NULL AS unit,
        greatest(g.from_t, s.ctx_start_t) AS from_t, g.to_t, nullif(count(x.t_us), 0)::BIGINT AS n,
        format('the prefill showed nothing of its queues for {:.0f} s ({}{}){}',
               (g.to_t - greatest(g.from_t, s.ctx_start_t)) / 1e6,
               CASE WHEN count(x.t_us) > 0 THEN 'no #inflight-req in any batch line' ELSE 'no batch line, no request line' END,
               CASE WHEN g.stopped THEN ', to its stop' WHEN NOT g.seen_after THEN ', to the window end' ELSE '' END,
               CASE WHEN count(x.t_us) > 0
                    THEN format(': it ran {} batch(es) whose lines carry no #inflight-req (line shape {}), so its inflight queue was not observed (request lines name what entered and left it, but not what an unlogged abort or completion left in it)',
                                count(x.t_us), string_agg(DISTINCT coalesce(x.entry, '?'), ', '))
                    ELSE '' END) AS detail,
        g.seen_after
    FROM (
        -- a restart names its own downtime: the silence counts from the engine's return; a stop
        -- it does not come back from ends the silence there, less the hang a scheduler watchdog
        -- reports (a stop never names the silence before it: that is where the lines went missing)
        SELECT g.host, g.seen_after,
            greatest(g.from_t, max(x.to_t) FILTER (WHERE x.to_t < g.to_t)) AS from_t,
            least(g.to_t, min(x.from_t - x.hang_us) FILTER (WHERE x.to_t >= g.to_t)) AS to_t,
            coalesce(bool_or(x.to_t >= g.to_t), false) AS stopped
        FROM quiet_gaps AS g
        LEFT JOIN downs_named AS x ON x.host = g.host AND x.from_t <= g.to_t AND x.to_t >= g.from_t
        GROUP BY g.host, g.from_t, g.to_t, g.seen_after
    ) AS g
    CROSS JOIN s
    LEFT JOIN gaugeless AS x ON x.host = g.host AND x.t_us > g.from_t AND x.t_us < g.to_t
    WHERE g.from_t IS NOT NULL AND g.to_t - greatest(g.from_t, s.ctx_start_t) > s.stuck_us AND g.to_t > s.start_t
      AND NOT EXISTS (SELECT 1 FROM silent AS x WHERE x.host = g.host AND x.engine = 'prefill'
                      AND x.from_t <= g.to_t AND x.to_t >= g.from_t)
    GROUP BY g.host, g.from_t, g.to_t, g.seen_after, g.stopped, s.ctx_start_t
),
holes_raw AS (
    SELECT * FROM suppressed
    UNION ALL SELECT * FROM parse_errors
    UNION ALL SELECT * FROM down
    UNION ALL SELECT * FROM silent
    UNION ALL SELECT * FROM quiet
),
prefill_evidence AS MATERIALIZED (
    -- what the prefill side last showed, per host
    SELECT host, max(hi_t) AS last_t FROM queue_seen GROUP BY 1
),
decode_evidence AS MATERIALIZED (
    -- what each decode last showed of its queues: a batch line or a request line
    SELECT e.host, max(e.hi_us) - any_value(coalesce(o.offset_us, 0)) AS last_t
    FROM event_secs AS e
    LEFT JOIN offsets AS o ON o.host = e.host
    WHERE e.engine = 'decode'
      AND e.event IN ('decode_stats', 'request_received', 'request_finished', 'req_time_stats',
                      'decode_handshake_failed', 'decode_transfer_failed', 'decode_watchdog_fired')
    GROUP BY e.host
),
-- What each engine's stats lines showed of its queues: `observed` in the verdict's JSON.
stat_samples AS MATERIALIZED (
    SELECT coalesce(e.host, '') AS host, e.engine, e.ts_us - coalesce(o.offset_us, 0) AS t_us,
        e.inflight_req, e.bootstrap_req, e.transfer_req, e.prealloc_req, e.queue_req, e.ts_us, e.entry
    FROM events AS e
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.window_lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE e.event = 'prefill_stats' AND e.engine = 'prefill'
    UNION ALL
    SELECT coalesce(e.host, '') AS host, e.engine, e.ts_us - coalesce(o.offset_us, 0) AS t_us,
        NULL, NULL, e.transfer_req, e.prealloc_req, e.queue_req, e.ts_us, e.entry
    FROM events AS e
    JOIN hw ON hw.host = coalesce(e.host, '') AND e.ts_us >= hw.window_lo_us AND e.ts_us <= hw.hi_us
    LEFT JOIN offsets AS o ON o.host = coalesce(e.host, '')
    WHERE e.event = 'decode_stats' AND e.engine = 'decode'
),
request_seen AS (
    -- lines that show a PD request's way through the queues: a Receive: with a bootstrap room (a
    -- non-PD server's have none), a transfer failure, the watchdog
    SELECT host, engine, sum(n)::BIGINT AS n FROM (
        SELECT e.host, e.engine,
            CASE WHEN e.event = 'request_received' THEN sum(e.n_received) ELSE count(*) END AS n
        FROM event_secs AS e, s
        WHERE e.engine IN ('prefill', 'decode') AND e.hi_us >= s.start_t
          AND e.event IN ('request_received', 'watchdog_fired', 'prefill_bootstrap_failed', 'prefill_transfer_failed',
                          'decode_handshake_failed', 'decode_transfer_failed')
        GROUP BY e.host, e.engine, e.event)
    GROUP BY ALL
),
-- Which line shapes (catalog entries) carried which queue, per incarnation: a queue is observed by
-- the lines that carry its field (design.md, "Observed"), and a build whose line lacks it is named.
line_shapes AS MATERIALIZED (
    SELECT x.host, x.engine, coalesce(i.incarnation, 1) AS incarnation, x.entry, count(*) AS lines,
        count(x.inflight_req) AS inflight, count(x.bootstrap_req) AS bootstrap, count(x.transfer_req) AS transfer,
        count(x.prealloc_req) AS prealloc, count(x.queue_req) AS waiting
    FROM stat_samples AS x
    ASOF LEFT JOIN (SELECT host, engine, incarnation, start_us FROM inc) AS i
      ON i.host = x.host AND i.engine = x.engine AND x.ts_us >= i.start_us
    GROUP BY ALL
),
observed AS MATERIALIZED (
    -- longest_gap_us: the longest stretch of the window without a stats line, its edges included;
    -- inflight_gap_us: the same for lines carrying #inflight-req (the prefill's inflight queue)
    SELECT coalesce(x.host, r.host) AS host, coalesce(x.engine, r.engine) AS engine,
        coalesce(x.samples, 0) AS samples, x.first_t, x.last_t,
        coalesce(x.inflight, 0) AS inflight, coalesce(x.bootstrap, 0) AS bootstrap,
        coalesce(x.transfer, 0) AS transfer, coalesce(x.prealloc, 0) AS prealloc, coalesce(x.waiting, 0) AS waiting,
        coalesce(r.n, 0) AS request_lines,
        greatest(x.longest_gap_us, x.first_t - s.start_t, s.end_t - x.last_t) AS longest_gap_us,
        CASE WHEN coalesce(x.engine, r.engine) = 'prefill'
             THEN coalesce(greatest(x.inflight_gap_us, x.first_inflight_t - s.start_t, s.end_t - x.last_inflight_t),
                           s.end_t - s.start_t) END AS inflight_gap_us,
        sh.line_shapes
    FROM (
        SELECT host, engine, count(*) AS samples, min(t_us) AS first_t, max(t_us) AS last_t,
            count(inflight_req) AS inflight, count(bootstrap_req) AS bootstrap, count(transfer_req) AS transfer,
            count(prealloc_req) AS prealloc, count(queue_req) AS waiting, max(gap) AS longest_gap_us,
            min(t_us) FILTER (WHERE inflight_req IS NOT NULL) AS first_inflight_t,
            max(t_us) FILTER (WHERE inflight_req IS NOT NULL) AS last_inflight_t,
            max(inflight_gap) AS inflight_gap_us
        FROM (SELECT *, t_us - lag(t_us) OVER (PARTITION BY host, engine ORDER BY t_us) AS gap,
                  CASE WHEN inflight_req IS NOT NULL
                       THEN t_us - lag(t_us) OVER (PARTITION BY host, engine, inflight_req IS NOT NULL ORDER BY t_us) END
                      AS inflight_gap
              FROM stat_samples)
        GROUP BY ALL
    ) AS x
    FULL JOIN request_seen AS r ON r.host = x.host AND r.engine = x.engine
    CROSS JOIN s
    LEFT JOIN (
        SELECT host, engine, list(ls ORDER BY ls.incarnation, ls.entry) AS line_shapes
        FROM line_shapes AS ls GROUP BY host, engine
    ) AS sh ON sh.host = coalesce(x.host, r.host) AND sh.engine = coalesce(x.engine, r.engine)
),
tp_ranks AS MATERIALIZED (
    -- how many TP ranks each prefill host has (failure and firing lines come from every rank)
    SELECT coalesce(e.host, '') AS host, count(DISTINCT e.tp_rank) AS tp_ranks
    FROM events AS e JOIN gb ON e.ts_us >= gb.lo_us AND e.ts_us <= gb.hi_us
    WHERE e.engine = 'prefill' AND e.tp_rank IS NOT NULL
    GROUP BY 1
),
abort_rooms AS MATERIALIZED (
    -- L3 `Abort <queue> request.` lines carry only the rid: their room is the one the same engine's
    -- Receive: line gave that rid
    SELECT DISTINCT a.line_id, r.bootstrap_room AS room
    FROM events AS a
    JOIN hw ON hw.host = coalesce(a.host, '') AND a.ts_us >= hw.lo_us AND a.ts_us <= hw.hi_us
    JOIN events AS r ON r.engine = a.engine AND r.rid = a.rid AND r.event = 'request_received'
    WHERE a.event IN ('abort_request', 'retract_abort') AND a.bootstrap_room IS NULL AND r.bootstrap_room IS NOT NULL
),
-- ------------------------------------------------------------------- the universe of instances
-- Every prefill instance some line names (design.md, "Exists"): the decode's `bootstrap_host`
-- (the router puts the prefill's address in both legs), router lines naming a prefill worker and
-- a prefill's Prometheus target.
-- A named address that no collected prefill answers to (its own Receive: lines carry it, or it is
-- the host's name) is an instance whose lines are absent: `unobserved`. Prefill hosts that log no
-- Receive: (L0) have no known address: only the named addresses beyond their number are surely
-- another instance's, and then each unknown one is listed (which of them is missing is not known).
prefill_mentions AS MATERIALIZED (
    SELECT address, list(DISTINCT named_by ORDER BY named_by) AS named_by, sum(n)::BIGINT AS n
    FROM (
        SELECT e.bootstrap_host AS address, format('decode {} (bootstrap_host=)', coalesce(e.host, '?')) AS named_by,
            count(*) AS n
        FROM events AS e JOIN gb ON e.ts_us >= gb.lo_us AND e.ts_us <= gb.hi_us
        WHERE e.engine = 'decode' AND e.event IN ('request_received', 'request_received_openai')
          AND e.bootstrap_host IS NOT NULL AND e.bootstrap_host NOT IN ('', '2.2.2.2')
        GROUP BY ALL
        UNION ALL
        SELECT regexp_extract(e.addr, '^(?:[a-z]+://)?\[?([^\]/:]+)', 1), format('router {} (prefill worker)', coalesce(e.host, '?')),
            count(*)
        FROM events AS e JOIN gb ON e.ts_us >= gb.lo_us AND e.ts_us <= gb.hi_us
        WHERE e.event = 'router_log' AND e.addr IS NOT NULL AND json_extract_string(e.extra, '$.worker_role') = 'prefill'
        GROUP BY ALL
        UNION ALL
        -- a prefill's Prometheus target (ingest --prometheus): by the log host it was matched to,
        -- else its instance label's host; judged in the whole window only (a fleet instance's
        -- scope holds one prefill's lines, and the other targets are not its own)
        SELECT coalesce(m.host, regexp_extract(m.instance, '^(?:[a-z]+://)?\[?([^\]/:]+)', 1)),
            format('prometheus target {} (job {})', coalesce(m.instance, '?'), coalesce(m.job, '?')),
            count(DISTINCT m.ts_us)
        -- (with no line, no host window: the asked window, else every sample)
        FROM metric_samples AS m, gb, clock
        WHERE m.engine = 'prefill' AND getvariable('pdf_instance') IS NULL
          AND m.ts_us >= coalesce(gb.lo_us, clock.ctx_start_t, m.ts_us)
          AND m.ts_us <= coalesce(gb.hi_us, clock.end_t, m.ts_us)
        GROUP BY ALL
    )
    WHERE coalesce(address, '') <> ''
    GROUP BY address
),
prefill_addresses AS MATERIALIZED (
    SELECT DISTINCT coalesce(e.host, '') AS host, e.bootstrap_host AS address
    FROM events AS e JOIN gb ON e.ts_us >= gb.lo_us AND e.ts_us <= gb.hi_us
    WHERE e.engine = 'prefill' AND e.event IN ('request_received', 'request_received_openai')
      AND e.bootstrap_host IS NOT NULL AND e.bootstrap_host NOT IN ('', '2.2.2.2')
    UNION
    SELECT DISTINCT host, host FROM seconds WHERE engine = 'prefill'
),
unknown_mentions AS MATERIALIZED (
    SELECT m.* FROM prefill_mentions AS m
    WHERE m.address NOT IN (SELECT address FROM prefill_addresses)
),
unobserved_prefills AS MATERIALIZED (
    SELECT * FROM unknown_mentions
    WHERE (SELECT count(*) FROM unknown_mentions) > (
        -- prefill hosts whose own lines name no address of theirs
        SELECT count(DISTINCT host) FROM seconds WHERE engine = 'prefill'
          AND host NOT IN (SELECT host FROM prefill_addresses WHERE address <> host))
),
holes AS MATERIALIZED (
    SELECT
        row_number() OVER (ORDER BY h.from_t, h.kind, h.host) AS hole_id,
        h.*,
        ev.last_t AS prefill_evidence_until_t,
        coalesce(ev.last_t >= h.to_t + s.stuck_us, false) AS covered
    FROM holes_raw AS h
    CROSS JOIN s
    LEFT JOIN (
        -- a hole on a prefill host is judged by that host's later evidence; other holes by any prefill's
        SELECT host, last_t FROM prefill_evidence
        UNION ALL
        SELECT NULL, max(last_t) FROM prefill_evidence
    ) AS ev
      ON (h.engine = 'prefill' AND h.host <> '' AND ev.host = h.host)
      OR ((h.engine IS DISTINCT FROM 'prefill' OR h.host = '') AND ev.host IS NULL)
)

SELECT
    s.*,
    (SELECT list(o ORDER BY o.host) FROM (SELECT o.*, hw.lo_us, hw.hi_us FROM offsets AS o JOIN hw USING (host)) AS o) AS host_offsets,
    (SELECT list(i ORDER BY i.host, i.engine, i.incarnation) FROM inc AS i) AS incarnations,
    (SELECT list(r ORDER BY r.stop_t) FROM restarts AS r) AS engine_restarts,
    (SELECT list(g ORDER BY g.host, g.incarnation) FROM gauge AS g) AS host_gauge,
    (SELECT list(h ORDER BY h.hole_id) FROM holes AS h) AS holes,
    (SELECT list(c ORDER BY c.host, c.engine) FROM coverage_by_engine AS c) AS engine_coverage,
    coalesce((SELECT list(x ORDER BY x.engine DESC, x.host) FROM observed AS x), []) AS observed,
    coalesce((SELECT list(x ORDER BY x.from_t, x.host, x.queue) FROM frozen AS x), []) AS frozen_queues,
    coalesce((SELECT list(x ORDER BY x.t_us) FROM logging_changes AS x), []) AS logging_changes,
    coalesce((SELECT list(DISTINCT host ORDER BY host) FROM seconds WHERE engine = 'prefill'), []) AS prefill_hosts,
    coalesce((SELECT list(u ORDER BY u.address) FROM unobserved_prefills AS u), []) AS unobserved_prefills,
    coalesce((SELECT list(a ORDER BY a.line_id, a.room) FROM abort_rooms AS a), []) AS abort_rooms,
    (SELECT list(t ORDER BY t.host) FROM tp_ranks AS t) AS prefill_tp_ranks,
    (SELECT max(last_t) FROM prefill_evidence) AS prefill_evidence_until_t,
    coalesce((SELECT list(x ORDER BY x.host) FROM prefill_evidence AS x), []) AS prefill_evidence,
    coalesce((SELECT list(x ORDER BY x.host) FROM decode_evidence AS x), []) AS decode_evidence,
    EXISTS (SELECT 1 FROM seconds WHERE engine = 'decode') AS decode_logged,
    coalesce(
        (SELECT max(evidence_level) FROM coverage_by_engine WHERE engine = 'prefill'),
        (SELECT max(evidence_level) FROM coverage_by_engine),
        'L0'
    ) AS evidence_level
FROM s;
