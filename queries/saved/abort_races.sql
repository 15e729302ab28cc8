-- Abort races: aborts that landed while the prefill side was in the inflight queue, and whether the request was released or left pinned
-- From the `abort_races` view. `outcome`: released (a prefill line ended it), pinned (held past the
-- timeout afterwards), open (not yet a full timeout old), gone with the prefill.
SELECT
    room,
    outcome,
    class,
    evidence,
    make_timestamp(aborted_t) AS aborted_utc,
    make_timestamp(prefill_end_t) AS prefill_end_utc,
    round(dwell_s, 1) AS dwell_s,
    dwell_basis,
    prefill_rid,
    decode_rid,
    evidence_level
FROM abort_races
ORDER BY aborted_t NULLS LAST, room;
