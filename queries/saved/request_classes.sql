-- How many requests ended in each class, with the flags (abort races, across a restart, one-sided) and the dwell range
-- From the `requests` view; classes in the design's order (first match wins).
SELECT
    class,
    count(*) AS requests,
    count(*) FILTER (WHERE abort_race) AS abort_races,
    count(*) FILTER (WHERE across_restart) AS across_restart,
    count(*) FILTER (WHERE one_sided) AS one_sided,
    count(*) FILTER (WHERE might_be_stuck) AS might_be_stuck,
    round(min(dwell_s), 1) AS min_dwell_s,
    round(median(dwell_s), 1) AS median_dwell_s,
    round(max(dwell_s), 1) AS max_dwell_s,
    list(DISTINCT evidence_level ORDER BY evidence_level) AS evidence_levels
FROM requests
GROUP BY class
ORDER BY pdf_class_rank(class);
