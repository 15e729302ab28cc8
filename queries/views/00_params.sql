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
--                            Default: the span of the stored lines.
--   pdf_suppress_interval_s  how far back a journald `Suppressed N messages` line reaches
--                            (journald RateLimitIntervalSec). Default 30 s.
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
--   04_room_facts     room_facts: what both engines logged, one row per bootstrap_room
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
    300.0::DOUBLE AS default_timeout_s;

-- The window on each host's own clock: --since/--until when given, else the span of the data.
CREATE OR REPLACE VIEW time_window AS
WITH span AS (
    SELECT min(ts_us) AS lo, max(ts_us) AS hi FROM lines WHERE ts_us IS NOT NULL
)
SELECT
    coalesce(p.since_us, span.lo) AS start_us,
    coalesce(p.until_us, span.hi) AS end_us,
    p.since_us IS NOT NULL AS start_given,
    p.until_us IS NOT NULL AS end_given,
    p.*
FROM params AS p, span;

-- Times in reasons: UTC, seconds.
CREATE OR REPLACE MACRO pdf_ts(t_us) AS strftime(make_timestamp(t_us::BIGINT), '%Y-%m-%d %H:%M:%SZ');

-- The classes in the design's order (first match wins): where lists of requests sort by class.
CREATE OR REPLACE MACRO pdf_class_rank(class) AS
    list_position(['watchdog_fired', 'silent_pin', 'transfer_failed', 'aborted', 'lost', 'completed', 'in_flight'], class);

-- The last line_id folded into the summary tables (fold.py): lines after it are read themselves.
CREATE OR REPLACE MACRO pdf_folded_upto() AS TABLE
    SELECT coalesce(max(TRY_CAST(value AS BIGINT)), 0) AS line_id FROM meta WHERE key = 'folded_upto';
