-- Coverage holes (journald suppression, parse failures, engines down or silent, a short window) and whether they decide the verdict
-- From the `coverage` view. `decisive`: the hole overlaps a request that might be stuck and no
-- prefill evidence covers a full timeout after it; such holes make the verdict inconclusive.
SELECT
    hole_id,
    kind,
    host,
    engine,
    make_timestamp(from_t) AS from_utc,
    make_timestamp(to_t) AS to_utc,
    round((to_t - from_t) / 1e6, 1) AS duration_s,
    detail,
    covered,
    suspects,
    suspect_rooms,
    decisive
FROM coverage
ORDER BY from_t, kind, host;
