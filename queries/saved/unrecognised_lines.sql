-- Lines no catalog entry recognised, grouped by where they came from, with a sample of each kind
-- Kept and counted, not parse failures (those are `parse_errors`). Continuation lines of a
-- multi-line record (tracebacks) are counted with their first line's group, not on their own.
-- The shape groups messages whose digits, hex ids and quoted strings differ.
WITH unrecognised AS (
    SELECT
        *,
        regexp_replace(
            regexp_replace(
                regexp_replace(message, '\x1b\[[0-9;]*m', '', 'g'),
                '''[^'']*''|"[^"]*"', '''…''', 'g'),
            '(0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*', 'N', 'g') AS shape
    FROM lines
    WHERE event IS NULL AND parse_error IS NULL AND cont_of IS NULL
      -- the first piece of a record split into several (CRI `P`): its last piece holds the event
      AND line_id NOT IN (SELECT cont_of FROM lines WHERE cont_of IS NOT NULL AND event IS NOT NULL)
)
SELECT
    host,
    unit,
    engine,
    left(shape, 120) AS shape,
    count(*) AS lines,
    make_timestamp(min(ts_us)) AS first_utc,
    make_timestamp(max(ts_us)) AS last_utc,
    left(regexp_replace(any_value(message ORDER BY line_id), '\x1b\[[0-9;]*m', '', 'g'), 200) AS sample
FROM unrecognised
GROUP BY host, unit, engine, left(shape, 120)
ORDER BY lines DESC, host, unit, shape;
