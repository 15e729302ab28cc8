-- Requests per engine incarnation (one process run): when it started, was ready and stopped, and how the requests it received ended
-- A request side belongs to the incarnation running when it was received (`incarnations` view).
-- After a decode-only restart, `gone_with_it` counts the requests the old decode took down and
-- `open_at_end` those with no end in the logs at all. Times are UTC on the reference clock.
WITH inc AS (
    SELECT *, lead(start_t) OVER (PARTITION BY host, engine ORDER BY start_t) AS next_t
    FROM incarnations
),
sides AS (
    SELECT 'prefill' AS engine, p_host AS host, room, class,
           prefill_received_t AS recv_t, prefill_end_t AS end_t, p_gone_t AS gone_t
    FROM requests WHERE prefill_received_t IS NOT NULL AND p_host IS NOT NULL
    UNION ALL
    SELECT 'decode', d_host, room, class, decode_received_t, decode_end_t, d_gone_t
    FROM requests WHERE decode_received_t IS NOT NULL AND d_host IS NOT NULL
),
placed AS (
    SELECT s.*, i.incarnation
    FROM sides AS s
    ASOF JOIN inc AS i ON i.host = s.host AND i.engine = s.engine AND s.recv_t >= i.start_t
)
SELECT
    i.host,
    i.engine,
    i.incarnation,
    i.identity,
    i.started_by,
    make_timestamp(i.start_t) AS started_utc,
    make_timestamp(i.ready_t) AS ready_utc,
    make_timestamp(i.stop_t) AS stop_utc,
    make_timestamp(i.last_t) AS last_line_utc,
    count(p.room) AS received,
    count(p.end_t) AS ended,
    count(p.room) FILTER (WHERE p.end_t IS NULL AND p.gone_t IS NOT NULL) AS gone_with_it,
    count(p.room) FILTER (WHERE p.end_t IS NULL AND p.gone_t IS NULL) AS open_at_end,
    count(p.room) FILTER (WHERE p.class = 'completed') AS completed,
    count(p.room) FILTER (WHERE p.class NOT IN ('completed', 'in_flight')) AS not_completed
FROM inc AS i
LEFT JOIN placed AS p USING (host, engine, incarnation)
GROUP BY ALL
ORDER BY i.host, i.engine, i.incarnation;
