-- SGLang's Prometheus gauges beside the logs (`ingest --prometheus` / `--openmetrics`, table
-- metric_samples; docs/prometheus.md): evidence of their own kind, read only where it can make
-- the answer more cautious, never greener.
--
-- SGLang sets `sglang:num_prefill_inflight_queue_reqs` only with a `Prefill batch` line, and every
-- 30 s while the scheduler is fully idle (`_maybe_log_idle_metrics`). A stretch in which every
-- scrape read >= 1 while the prefill's own lines showed nothing of its queues is therefore either
-- a re-measured count while idle (builds before 0.5.23: a request still held), or a count kept
-- because the scheduler was not idle (0.5.23 counts the PD queues in `is_fully_idle`: some queue
-- was not empty). Either way, past timeout + grace nothing may be called healthy there, and which
-- request it was is not seen: `metric_quiet_holds` makes the verdict `inconclusive` (06_verdict).
-- A run of scrapes breaks at a 0 and at a scrape gap (a step over twice the series' usual one).
-- A fleet instance's scope judges its own prefill's gauge only.

-- Every prefill inflight-gauge scrape in the window (the whole data when no line bounds it), with
-- its series' usual step and its run: a run of scrapes breaks at a value < 1 and at a scrape gap
-- (a step over twice the series' median). The views below read it for the prefills of the logs
-- (metric_inflight, metric_quiet_holds) and for those only the metrics show (metric_only_prefills).
CREATE OR REPLACE VIEW metric_inflight_runs AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
g AS (
    SELECT m.host, coalesce(m.host, m.instance, '') AS target, m.series, m.ts_us AS t_us, m.value,
        m.ts_us - lag(m.ts_us) OVER (PARTITION BY m.series ORDER BY m.ts_us) AS step_us
    FROM metric_samples AS m, c
    WHERE m.engine = 'prefill'
      -- builds before 0.5.x misspelt it
      AND m.metric IN ('sglang:num_prefill_inflight_queue_reqs', 'sglang:num_prefill_infight_queue_reqs')
      AND (c.start_t IS NULL OR m.ts_us >= c.start_t) AND (c.end_t IS NULL OR m.ts_us <= c.end_t)
),
cadence AS (SELECT series, median(step_us) AS interval_us FROM g GROUP BY series)
SELECT g.*, x.interval_us, coalesce(g.step_us > 2 * x.interval_us, false) AS gap,
    sum(CASE WHEN g.value < 1 OR g.step_us IS NULL OR g.step_us > 2 * x.interval_us THEN 1 ELSE 0 END)
        OVER (PARTITION BY g.series ORDER BY g.t_us) AS run_id
FROM g JOIN cadence AS x ON x.series = g.series;

CREATE OR REPLACE VIEW metric_inflight AS
SELECT host, series, t_us, value, step_us FROM metric_inflight_runs
WHERE host IN (SELECT unnest(prefill_hosts) FROM context);

CREATE OR REPLACE VIEW metric_quiet_holds AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
runs AS (SELECT * FROM metric_inflight_runs WHERE host IN (SELECT unnest(prefill_hosts) FROM c)),
held AS (
    SELECT host, series, run_id, min(t_us) AS from_t, max(t_us) AS to_t, count(*) AS scrapes,
        min(value) AS at_least, any_value(interval_us) AS interval_us
    FROM runs WHERE value >= 1
    GROUP BY host, series, run_id
),
-- the longest stretch of the run with no inflight sample of the prefill's own lines in it (its
-- batch lines observe the queue: where they do, the gauge's count is their batch's, and the logs
-- judge)
seen AS (
    SELECT h.series, h.run_id, x.t_us
    FROM held AS h
    JOIN (SELECT DISTINCT host, t_us FROM inflight_gauge) AS x
      ON x.host = h.host AND x.t_us > h.from_t AND x.t_us < h.to_t
    UNION ALL SELECT series, run_id, from_t FROM held
    UNION ALL SELECT series, run_id, to_t FROM held
),
gaps AS (
    SELECT series, run_id, t_us AS quiet_from,
        lead(t_us) OVER (PARTITION BY series, run_id ORDER BY t_us) - t_us AS quiet_us
    FROM seen
),
longest AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (PARTITION BY series, run_id ORDER BY quiet_us DESC, quiet_from) AS k
        FROM gaps WHERE quiet_us IS NOT NULL
    ) WHERE k = 1
)
SELECT h.host, h.series, h.from_t, h.to_t, l.quiet_from, l.quiet_us, h.scrapes,
    CAST(h.at_least AS BIGINT) AS at_least, h.interval_us
FROM held AS h
JOIN longest AS l USING (series, run_id)
CROSS JOIN c
WHERE l.quiet_us > c.stuck_us;

-- Prefill targets the metrics show and no line of the window does (the journal rotated away, a
-- host's file never collected, a target --prometheus-map does not name): instances of the
-- universe judged from the gauge alone, never healthy. The gauge is set with a batch line, or
-- every 30 s while the scheduler is fully idle (0.5.23: only while every queue, the PD ones too,
-- is empty): a 0 is the last count, not a sample of the queue since, so metrics alone never earn
-- `nothing_stuck`; a run held >= 1 past timeout + grace may be a pin no line is left to name. Judged
-- in the whole window only (a fleet instance's scope holds one prefill's lines: the others'
-- gauges are not its own).
CREATE OR REPLACE VIEW metric_only_prefills AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
runs AS (
    SELECT * FROM metric_inflight_runs
    WHERE getvariable('pdf_instance') IS NULL AND coalesce(host, '') NOT IN (SELECT unnest(prefill_hosts) FROM c)
),
held AS (
    SELECT target, series, run_id, min(t_us) AS from_t, max(t_us) - min(t_us) AS held_us, min(value) AS at_least
    FROM runs WHERE value >= 1
    GROUP BY ALL
),
longest AS (
    SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY target ORDER BY held_us DESC, from_t) AS k FROM held)
    WHERE k = 1
)
SELECT r.target, count(*) AS scrapes, min(r.t_us) AS from_t, max(r.t_us) AS to_t,
    median(r.interval_us) AS interval_us, count(*) FILTER (WHERE r.gap) AS gaps,
    max(r.value) AS peak, any_value(l.from_t) AS held_from, any_value(l.held_us) AS held_us,
    CAST(any_value(l.at_least) AS BIGINT) AS at_least,
    coalesce(any_value(l.held_us) > any_value(c.stuck_us), false) AS held_past_timeout
FROM runs AS r
LEFT JOIN longest AS l USING (target)
CROSS JOIN c
GROUP BY r.target;
