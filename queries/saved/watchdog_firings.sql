-- Watchdog firings: one row per request the inflight watchdog force-failed, with dwell, state, and whether every TP rank fired in the same second
-- From the `watchdog_firings` view (TP ranks merged). `late`: the dwell exceeded the timeout by more
-- than the grace. `same_second`: the patch checks the deadline before the all-reduce, so every rank
-- should fire within one second; `all_ranks`: every TP rank seen on that host fired.
SELECT
    f.bootstrap_room::VARCHAR AS room,
    f.rid,
    f.host,
    make_timestamp(f.fired_t) AS fired_utc,
    f.dwell_s,
    f.timeout_s,
    f.state,
    f.ranks,
    f.n_ranks,
    f.host_tp_ranks,
    f.all_ranks,
    f.same_second,
    f.late,
    r.class,
    r.across_restart
FROM watchdog_firings AS f
LEFT JOIN requests AS r USING (bootstrap_room)
ORDER BY f.fired_t, f.host;
