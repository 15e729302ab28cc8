-- Recognised SGLang lines whose catalog pattern failed to parse (these can make a window inconclusive)
-- `parse_error` names the catalog entry whose literal anchor matched; `pdforensics catalog` lists
-- the entries; a `--catalog` file can fix a pattern for your build.
SELECT
    parse_error AS entry,
    host,
    unit,
    count(*) AS lines,
    make_timestamp(min(ts_us)) AS first_utc,
    make_timestamp(max(ts_us)) AS last_utc,
    left(any_value(message ORDER BY line_id), 200) AS sample
FROM lines
WHERE parse_error IS NOT NULL
GROUP BY ALL
ORDER BY lines DESC, entry, host, unit;
