-- Engine restarts and stops: when the old process stopped, when its last line was, and when the new one was up
-- From the `engine_restarts` view (a decode-only restart is the seeds' incident). Times are UTC on
-- the reference clock.
SELECT
    host,
    engine,
    kind,
    old_incarnation,
    new_incarnation,
    old_identity,
    new_identity,
    make_timestamp(stop_t) AS stopped_utc,
    make_timestamp(gone_t) AS gone_utc,
    make_timestamp(up_t) AS up_utc,
    round((up_t - stop_t) / 1e6, 1) AS down_s,
    how
FROM engine_restarts
ORDER BY stop_t, host, engine;
