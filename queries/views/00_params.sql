-- pdforensics classification views. Installed in file-name order by
-- `pdforensics.verdict.install_views()`; they read only the tables `lines` and `events`
-- (docs/internals.md).
--
-- Parameters are DuckDB session variables, so the views work in a plain `duckdb` shell and on a
-- read-only connection. Unset variables take the defaults named here.
--
--   pdf_watchdog_timeout_s   the inflight-watchdog timeout the operator states (--watchdog-timeout).
--                            Default: the `inflight watchdog armed: ...=Ns` line, else a firing's own
--                            `stalled >Ns`, else 300 s (the patch's generous default).
--   pdf_watchdog_deployed    true/false when the operator knows; default: inferred from the lines.
--   pdf_grace_s              slack on top of the timeout before a request counts as stuck, and before a
--                            firing counts as late (--grace). Default 10 s: the watchdog checks once per
--                            scheduler loop, a loop can sit behind a multi-second prefill forward, and
--                            1-second log prefixes blur each end by up to a second.
--   pdf_since_us, pdf_until_us   the window in UTC microseconds (--since/--until).
--                            Default: the window of the last ingest that stored lines (see
--                            time_window), else the span of the stored lines.
--   pdf_suppress_interval_s  how far back a journald `Suppressed N messages` line reaches
--                            (journald RateLimitIntervalSec). Default 30 s.
--   pdf_context_s            how far before the window lines are read as context (requests still
--                            open at its start, incarnations, the gauge). Default 3 x (timeout +
--                            grace), at least 900 s.
--   pdf_env_timeout_s, pdf_env_unit   the timeout the live host's prefill unit environment sets
--                            (`systemctl show -p Environment`: SGLANG_DSV4_PREFILL_INFLIGHT_TIMEOUT),
--                            and that unit. Configuration, not proof of arming: an armed line, or a
--                            prefill start without one, says more.
--   pdf_instance             the prefill host one fleet instance's judgement is scoped to
--                            (08_instances.sql; pdforensics.verdict sets it on its own connection).
--   pdf_foreign_sides        inside that scope: the other prefills' sides of the rooms the instance
--                            shares with them (08_instances.sql shared_prefill_sides, on its clock).
--   pdf_fleet_timeout_s, pdf_fleet_timeout_basis   for one instance of a fleet: the timeout the
--                            other instances' lines show, used when the instance's own lines show
--                            none (builds differ; the operator's expectation is the fleet's).
--   pdf_fleet_stuck_queues   for one instance of a fleet: the queues the whole window found stuck
--                            (`host|engine|queue;...`): another engine's frozen queue is charged
--                            to the instance only when the whole window could not explain it.
--   pdf_storm_min_aborts, pdf_storm_gap_s   an abort storm is at least N aborted requests with
--                            no gap longer than S seconds between them. Defaults 10 and 5 s.
--
-- Example:
--   SET VARIABLE pdf_watchdog_timeout_s = 60;
--   SELECT * FROM verdict;
--   SELECT * FROM requests WHERE class <> 'completed';
--
-- Layout. DuckDB inlines a view wherever it is referenced, so the rules are grouped into a few
-- one-row "bundles" whose steps are MATERIALIZED CTEs (each computed once), and most other views
-- are thin projections of them:
--   01_context        `context`: window, clocks, watchdog, incarnations, restarts, holes, gauge
--   02_context_views  settings, watchdog, clock_window, host_offsets, incarnations, engine_restarts,
--                     host_gauge, holes, engine_coverage, evidence
--   03_rows           evt, room_events (= pdf_room_lines(false)), inflight_gauge (one row per line /
--                     gauge sample)
--   04_room_facts     room_facts: what both engines logged, one row per request (room, and the prefill
--                     holding it where two deployments share the room)
--   05_requests       room_state, requests: the class and flags of every request
--   06_verdict        `verdict`: counts, pins, holes that decide, abort storms, reasons, the verdict
--   07_findings       coverage, anonymous_pins, abort_storms, verdict_reasons, pins,
--                     watchdog_firings, abort_races, request_phases
-- In a plain shell each query plans the whole stack; to ask several questions of a big database,
-- keep the heavy steps first: CREATE TEMP TABLE context AS FROM context; (then inflight_gauge,
-- requests, verdict in that order) -- temporary tables win over the views of the same name.
-- room_facts need not be kept: `requests` computes it once (a MATERIALIZED step), and a table
-- of a million wide rows costs more to write than the aggregate costs to compute.
-- Clocks: `ts_us` is each host's own clock; `*_t` columns are on the reference clock (the busiest
-- prefill host), moved there by `host_offsets`. Durations use `*_t`.

CREATE OR REPLACE VIEW params AS
SELECT
    getvariable('pdf_watchdog_timeout_s')::DOUBLE AS operator_timeout_s,
    getvariable('pdf_watchdog_deployed')::BOOLEAN AS operator_deployed,
    coalesce(getvariable('pdf_grace_s'), 10)::DOUBLE AS grace_s,
    getvariable('pdf_since_us')::BIGINT AS since_us,
    getvariable('pdf_until_us')::BIGINT AS until_us,
    coalesce(getvariable('pdf_suppress_interval_s'), 30)::DOUBLE AS suppress_interval_s,
    coalesce(getvariable('pdf_storm_min_aborts'), 10)::INTEGER AS storm_min_aborts,
    coalesce(getvariable('pdf_storm_gap_s'), 5)::DOUBLE AS storm_gap_s,
    300.0::DOUBLE AS default_timeout_s,
    getvariable('pdf_context_s')::DOUBLE AS context_s,
    getvariable('pdf_env_timeout_s')::DOUBLE AS env_timeout_s,
    getvariable('pdf_env_unit')::VARCHAR AS env_unit,
    getvariable('pdf_fleet_timeout_s')::DOUBLE AS fleet_timeout_s,
    getvariable('pdf_fleet_timeout_basis')::VARCHAR AS fleet_timeout_basis,
    getvariable('pdf_fleet_stuck_queues')::VARCHAR AS fleet_stuck_queues;

-- The window on each host's own clock: --since/--until when given, else the window of the last
-- ingest that stored lines (its own --since/--until, else the span of the lines it stored) and of
-- the runs before it that overlap it, so an older incident in the same file is context, not part
-- of today's answer; a database without ingest runs (written by hand) is judged whole. A start given with no end judges up to the end of
-- the data, never an inverted window: a window after the data is a window with no line in it.
-- Context: lines up to `pdf_context_s` before the window (default: 3 x (timeout + grace), at
-- least 15 min) are read for what they say about the window (requests still open at its start,
-- incarnations, the gauge); only what lives in the window is judged.
CREATE OR REPLACE VIEW time_window AS
WITH runs AS (
    SELECT ingest_id, since_us, until_us, count(*) OVER () AS n_runs
    -- runs that read logs: a metrics run (ingest --prometheus/--openmetrics) stores samples, not
    -- lines, and its window is not the one the logs were read for
    FROM ingests
    WHERE (stored > 0 OR since_us IS NOT NULL OR until_us IS NOT NULL)
      AND coalesce(readers, '') NOT IN ('prometheus', 'openmetrics')
),
-- read_to: the latest time each run read (source_stats.read_to_us): a span of the data never ends
-- before what was read, even when lines read then are gone from the database since
read_to AS (
    SELECT ingest_id, max(read_to_us) AS hi FROM source_stats WHERE read_to_us IS NOT NULL GROUP BY ingest_id
),
span AS (
    SELECT min(ts_us) AS lo, greatest(max(ts_us), (SELECT max(hi) FROM read_to)) AS hi FROM lines WHERE ts_us IS NOT NULL
),
run_lines AS (
    -- only read when there is more than one run to choose from
    SELECT x.ingest_id, x.lo, greatest(x.hi, r.hi) AS hi
    FROM (
        SELECT l.ingest_id, min(l.ts_us) AS lo, max(l.ts_us) AS hi
        FROM lines AS l
        WHERE l.ts_us IS NOT NULL AND (SELECT max(n_runs) FROM runs) > 1
        GROUP BY l.ingest_id
    ) AS x
    LEFT JOIN read_to AS r USING (ingest_id)
),
run_spans AS (
    SELECT r.ingest_id, coalesce(r.since_us, x.lo) AS lo, coalesce(r.until_us, x.hi) AS hi
    FROM runs AS r LEFT JOIN run_lines AS x USING (ingest_id)
    WHERE coalesce(r.since_us, x.lo) IS NOT NULL
),
islands AS (
    -- runs whose spans overlap (within 10 minutes) read one incident: the prefill's file and the
    -- decode's ingested one after the other are one window, an incident hours earlier is not
    SELECT *, sum(starts) OVER (ORDER BY lo, ingest_id ROWS UNBOUNDED PRECEDING) AS island
    FROM (
        SELECT *, CASE WHEN lo > max(hi) OVER (ORDER BY lo, ingest_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                            + 600000000 THEN 1 ELSE 0 END AS starts
        FROM run_spans
    )
),
last_island AS (
    SELECT min(lo) AS lo, max(hi) AS hi, min(ingest_id) AS first_run, max(ingest_id) AS last_run,
        count(*) AS n_runs_in
    FROM islands
    WHERE island = (SELECT island FROM islands ORDER BY ingest_id DESC LIMIT 1)
),
-- the last island is the window when other runs lie outside it, or when one of its runs was read
-- for a window (--since/--until): lines before it are the context that run stored, not the window
island_is_window AS (
    SELECT (SELECT count(*) FROM islands) > (SELECT n_runs_in FROM last_island)
        OR coalesce((SELECT bool_or(since_us IS NOT NULL OR until_us IS NOT NULL) FROM runs
                     WHERE ingest_id IN (SELECT ingest_id FROM islands
                                         WHERE island = (SELECT island FROM islands ORDER BY ingest_id DESC LIMIT 1))),
                    false) AS yes
),
chosen AS (
    SELECT
        CASE WHEN p.since_us IS NOT NULL OR p.until_us IS NOT NULL THEN 'operator'
             WHEN iw.yes THEN 'last ingest'
             ELSE 'data' END AS basis,
        CASE WHEN p.since_us IS NOT NULL OR p.until_us IS NOT NULL THEN p.since_us
             WHEN iw.yes THEN (SELECT lo FROM last_island)
             ELSE span.lo END AS start_us,
        CASE WHEN p.since_us IS NOT NULL OR p.until_us IS NOT NULL THEN p.until_us
             WHEN iw.yes THEN (SELECT hi FROM last_island)
             ELSE span.hi END AS end_us,
        span.lo AS data_lo, span.hi AS data_hi
    FROM params AS p, span, island_is_window AS iw
)
SELECT
    coalesce(c.start_us, c.data_lo) AS start_us,
    -- never before the start: a start after the data judges an empty window, not an inverted one
    CASE WHEN c.end_us IS NOT NULL THEN c.end_us
         ELSE greatest(c.data_hi, coalesce(c.start_us, c.data_lo)) END AS end_us,
    -- given: true time (an option, or a run's own --since/--until), not the span of the lines
    p.since_us IS NOT NULL OR (c.basis = 'last ingest'
        AND (SELECT bool_or(since_us IS NOT NULL) FROM runs WHERE ingest_id IN (SELECT ingest_id FROM islands
             WHERE island = (SELECT island FROM islands ORDER BY ingest_id DESC LIMIT 1)))) AS start_given,
    p.until_us IS NOT NULL OR (c.basis = 'last ingest'
        AND (SELECT bool_or(until_us IS NOT NULL) FROM runs WHERE ingest_id IN (SELECT ingest_id FROM islands
             WHERE island = (SELECT island FROM islands ORDER BY ingest_id DESC LIMIT 1)))) AS end_given,
    c.basis AS window_basis,
    CASE WHEN c.basis = 'last ingest' THEN (SELECT CASE WHEN first_run = last_run THEN last_run::VARCHAR
                                                      ELSE first_run::VARCHAR || '-' || last_run::VARCHAR END
                                           FROM last_island) END AS window_runs,
    c.data_lo AS data_start_us, c.data_hi AS data_end_us,
    p.*
FROM params AS p, chosen AS c;

-- Times in reasons: UTC, seconds.
CREATE OR REPLACE MACRO pdf_ts(t_us) AS strftime(make_timestamp(t_us::BIGINT), '%Y-%m-%d %H:%M:%SZ');

-- The classes in the design's order (first match wins): where lists of requests sort by class.
CREATE OR REPLACE MACRO pdf_class_rank(class) AS
    list_position(['watchdog_fired', 'silent_pin', 'undecided', 'transfer_failed', 'retracted', 'aborted', 'lost', 'completed',
                   'in_flight'], class);

-- The last line_id folded into the summary tables (fold.py): lines after it are read themselves.
CREATE OR REPLACE MACRO pdf_folded_upto() AS TABLE
    SELECT coalesce(max(TRY_CAST(value AS BIGINT)), 0) AS line_id FROM meta WHERE key = 'folded_upto';
