-- The prefill inflight gauge over time: #inflight-req, the floor (#inflight-req minus the batch's #new-seq), bootstrap and waiting queues
-- One row per `Prefill batch` stats line (from the `inflight_gauge` view), per prefill host, DP/TP
-- rank and incarnation. A pinned request keeps the floor above 0 while traffic flows (design §2,
-- L0). Times are UTC on the reference clock; `ts_us` is the line's own host clock.
SELECT
    make_timestamp(t_us) AS time_utc,
    host,
    incarnation,
    dp_rank,
    tp_rank,
    inflight_req,
    new_seq,
    floor,
    bootstrap_req,
    queue_req,
    running_req,
    ts_us,
    line_id
FROM inflight_gauge
ORDER BY host, dp_rank, tp_rank, t_us, line_id;
