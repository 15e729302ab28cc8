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
-- Only the prefill hosts of the logs are judged (a fleet instance sees its own).
CREATE OR REPLACE VIEW metric_inflight AS
WITH c AS MATERIALIZED (SELECT * FROM context)
SELECT m.host, m.series, m.ts_us AS t_us, m.value,
    m.ts_us - lag(m.ts_us) OVER (PARTITION BY m.series ORDER BY m.ts_us) AS step_us
FROM metric_samples AS m
WHERE m.engine = 'prefill'
  -- builds before 0.5.x misspelt it
  AND m.metric IN ('sglang:num_prefill_inflight_queue_reqs', 'sglang:num_prefill_infight_queue_reqs')
  AND m.host IN (SELECT unnest(prefill_hosts) FROM c)
  AND m.ts_us BETWEEN (SELECT start_t FROM c) AND (SELECT end_t FROM c);

CREATE OR REPLACE VIEW metric_quiet_holds AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
cadence AS (SELECT series, median(step_us) AS interval_us FROM metric_inflight GROUP BY series),
runs AS (
    SELECT g.*, x.interval_us,
        sum(CASE WHEN g.value < 1 OR g.step_us IS NULL OR g.step_us > 2 * x.interval_us THEN 1 ELSE 0 END)
            OVER (PARTITION BY g.series ORDER BY g.t_us) AS run_id
    FROM metric_inflight AS g JOIN cadence AS x USING (series)
),
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
