-- Stuck requests: silent pins, watchdog firings, undecided ones and anonymous gauge pins, with their dwell against the timeout
-- One row per entry of the `pins` view. Times are UTC on the reference clock. `dwell_basis` says
-- how the dwell was measured: at L1 the prefill Receive is an upper bound. Set the timeout with
-- `--watchdog-timeout` (or `SET VARIABLE pdf_watchdog_timeout_s = 60` in a duckdb shell).
SELECT
    p.kind,
    p.room,
    p.class,
    p.outcome,
    p.n AS requests,
    round(p.dwell_s, 1) AS dwell_s,
    s.timeout_s,
    round(p.dwell_s - s.timeout_s, 1) AS over_timeout_s,
    p.dwell_basis,
    make_timestamp(p.since_t) AS since_utc,
    p.host,
    p.prefill_rid,
    p.decode_rid,
    p.abort_race,
    p.across_restart
FROM pins AS p, settings AS s
ORDER BY p.kind DESC, p.dwell_s DESC NULLS LAST, p.room;
