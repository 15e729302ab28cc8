-- One row per request (bootstrap_room; with `deployment` where two share it) with its class and
-- flags (design.md §3; first match wins):
--   watchdog_fired   a watchdog line force-failed it
--   silent_pin       held by the prefill past timeout+grace with no terminal line (prefill_status 'pinned')
--   undecided        it may still be held, and the logs cannot tell: a hole covers the moment its
--                    deadline passed (its end, perhaps a watchdog line, may be in it), the waiting
--                    queue never drained, or no prefill line says which prefill holds it; or, with
--                    no decode line in the window, the prefill handed it off and its end is unseen
--   transfer_failed  a failure line with a non-abort reason ended it (SGLang's own timeouts too:
--                    `reason` then starts `upstream_timeout (<kind>)`; they are never the watchdog)
--   retracted        a decode retraction (KV cache pool full) aborted it: neither a race nor a pin
--   aborted          an abort ended it
--   lost             the engine holding it stopped or restarted while it was open (or the prefill's
--                    queues were later seen empty without its end being logged): gone, not stuck
--   completed        finished normally (the decode's Finish / time stats)
--   in_flight        still open at the window end and younger than the timeout
-- Only requests that live in the window are listed: a request whose last line is before the
-- window start (context, see time_window) is not judged; one still open at the start is.
-- Flags: abort_race (an abort landed while the prefill side was past bootstrap, in the inflight
-- queue; abort_race_outcome says released / pinned / open), across_restart (its life spans a
-- restart of an engine that was not holding it), one_sided (seen on one engine only).
--
-- Evidence rules (sglang-log-reference §3-§4):
--   `Prefill transfer failed ... Aborted by AbortReq.`  the abort hit the inflight queue: an abort race, released
--   `Prefill bootstrap failed ...`                      the abort hit the bootstrap queue: not a race
--   `Decode transfer failed ...` (not handshake)        decode had finished its handshake, so the prefill
--                                                       was past bootstrap; if the prefill never reports
--                                                       the room again, it is still held there (pinned)
-- Where each request ended on each side, and who may still hold it (one row per request).
CREATE OR REPLACE VIEW room_state AS
SELECT
    f.*,
    -- the prefill released it: its Finish, time stats, a failure line, or the watchdog; no end
    -- while a later leg (a rebootstrap) is open: one leg's end never closes another
    CASE WHEN NOT f.p_reopened
         THEN least(f.p_done, f.p_stats_at, f.p_boot_failed, f.p_xfer_failed, f.p_finish_abort, f.wd_at, f.wd_reason_at)
    END AS p_end,
    least(f.d_done, f.d_stats_at, f.d_hs_failed, f.d_xfer_failed, f.d_finish_abort, f.d_wd_at, f.d_retracted_at) AS d_end,
    (f.d_done IS NOT NULL OR f.d_stats_at IS NOT NULL) AS d_completed,
    f.p_any_abort OR f.d_any_abort AS any_abort,
    -- a non-abort failure; a rank that only propagated another rank's failure counts only when
    -- no rank gave an abort as the reason
    f.p_any_failure OR f.d_any_failure
        OR ((f.p_any_propagated OR f.d_any_propagated) AND NOT (f.p_any_abort OR f.d_any_abort)) AS any_failure,
    (f.p_first IS NULL) <> (f.d_first IS NULL) AS one_sided,
    -- Prefill may still hold it (design.md, "Held"): no prefill-side end, and either the prefill
    -- saw it or `Decode transfer failed` says the prefill side was past bootstrap. A decode
    -- completion proves the KV arrived; it never releases the prefill's slot (the abort race
    -- leaves exactly that: a decode done, a prefill sender that never saw Success).
    ((f.p_reopened
      OR least(f.p_done, f.p_stats_at, f.p_boot_failed, f.p_xfer_failed, f.p_finish_abort, f.wd_at, f.wd_reason_at) IS NULL)
        AND (f.p_first IS NOT NULL OR f.d_xfer_failed IS NOT NULL)) AS prefill_may_hold,
    -- the decode received its KV: by then it had left the prefill's waiting queue
    least(f.d_done, f.d_stats_at) AS kv_arrived_by,
    CASE WHEN f.p_reopened THEN f.p_last_recv ELSE coalesce(f.p_recv, f.p_first, f.d_xfer_failed) END AS open_start,
    -- the Receive: of the leg the prefill may hold
    CASE WHEN f.p_reopened THEN f.p_last_recv ELSE f.p_recv END AS p_recv_open,
    -- decode holds it once the prefill sent its KV (or when the prefill never saw it)
    (f.p_done IS NOT NULL OR f.p_stats_at IS NOT NULL OR f.p_first IS NULL) AS decode_side_only,
    coalesce(f.d_first, f.p_done, f.p_stats_at) AS decode_from
FROM room_facts AS f;

CREATE OR REPLACE VIEW requests AS
WITH
c AS MATERIALIZED (SELECT * FROM context),
restarts AS MATERIALIZED (SELECT unnest(engine_restarts, recursive := true) FROM c),
holes AS MATERIALIZED (SELECT unnest(holes, recursive := true) FROM c),
gauge AS MATERIALIZED (SELECT unnest(host_gauge, recursive := true) FROM c),
prefill_hosts AS MATERIALIZED (SELECT unnest(prefill_hosts) AS host FROM c),
decode_hosts AS MATERIALIZED (SELECT DISTINCT host FROM (SELECT unnest(decode_evidence, recursive := true) FROM c)),
prefill_incarnations AS MATERIALIZED (
    SELECT x.start_t FROM (SELECT unnest(incarnations, recursive := true) FROM c) AS x WHERE x.engine = 'prefill'
),
-- the gauge's columns these rules read, once (every reference to a view plans it again)
ig AS MATERIALIZED (SELECT host, dp_rank, t_us, queue_req, floor, bootstrap_req FROM inflight_gauge),
-- every request, computed once (room_facts is the heavy step: one aggregate over the room lines)
-- A request the decode received, that no prefill line names although a prefill logs its requests
-- (L1): its prefill lines are missing, so the prefill may hold it unseen. One the decode finished
-- counts only while the prefill was logging requests (between its first and last request line):
-- its prefill Finish, after the decode's Receive, would be there; before or after that stretch
-- (the window's edge, a `Config logging` that turned the request log off) nothing is missing.
room_rows AS MATERIALIZED (SELECT * FROM room_state),
prefill_logs AS MATERIALIZED (
    SELECT coalesce(max(evidence_level) >= 'L1', false) AS l1,
        (SELECT min(p_first) FROM room_rows) AS logging_from,
        (SELECT max(p_last) FROM room_rows) AS logging_to
    FROM (SELECT unnest(engine_coverage, recursive := true) FROM c) WHERE engine = 'prefill'
),
-- rooms a decode line names with the address of a prefill whose lines are absent (context's
-- unobserved_prefills): the decode's Finish: says nothing of that prefill's hold
uncollected AS MATERIALIZED (
    SELECT DISTINCT e.bootstrap_room FROM events AS e
    WHERE e.engine = 'decode' AND e.bootstrap_host IN (SELECT address FROM (SELECT unnest(unobserved_prefills, recursive := true) FROM c))
),
-- when the decode received it: its Receive:, or, that line missing from a request the decode
-- finished and no prefill line names, any moment from the start of a hole on its decode (lost
-- lines, not a stop) before its first line up to that line: the Receive: may be in the hole
received AS MATERIALIZED (
    SELECT r.bootstrap_room, r.holder,
        coalesce(r.d_recv, min(x.from_t)) AS recv_from, coalesce(r.d_recv, r.d_first) AS recv_to
    FROM room_rows AS r
    LEFT JOIN holes AS x
      ON r.d_recv IS NULL AND r.d_completed AND x.engine = 'decode' AND x.kind <> 'engine_down'
     AND (x.host = r.d_host OR x.host = '' OR r.d_host IS NULL) AND x.from_t <= r.d_first
    WHERE r.p_first IS NULL
    GROUP BY r.bootstrap_room, r.holder, r.d_recv, r.d_first
    HAVING coalesce(r.d_recv, min(x.from_t)) IS NOT NULL
),
-- rooms the decode received while a prefill's lines were lost (suppressed, unparsable, silent
-- while traffic flowed; not a stop): their prefill Receive: may be among them
in_lost_lines AS MATERIALIZED (
    SELECT DISTINCT r.bootstrap_room FROM received AS r
    JOIN holes AS x ON x.engine = 'prefill' AND x.kind <> 'engine_down' AND r.recv_from <= x.to_t AND r.recv_to >= x.from_t
),
-- a projection of the materialised rows, inlined where it is read
rs AS NOT MATERIALIZED (
    SELECT * EXCLUDE (unnamed, recv_from) REPLACE (
        prefill_may_hold OR unnamed AS prefill_may_hold,
        coalesce(open_start, CASE WHEN unnamed THEN recv_from END) AS open_start)
    FROM (
        SELECT r.*, rc.recv_from,
            coalesce(rc.recv_from IS NOT NULL
                AND ((l.l1 AND (NOT r.d_completed
                                OR (rc.recv_from <= l.logging_to AND rc.recv_to >= l.logging_from)
                                -- or its Receive: fell where prefill lines were lost
                                OR ll.bootstrap_room IS NOT NULL))
                     -- its Receive: names a prefill none of whose lines were read
                     OR un.bootstrap_room IS NOT NULL), false) AS unnamed
        FROM room_rows AS r
        CROSS JOIN prefill_logs AS l
        LEFT JOIN received AS rc USING (bootstrap_room, holder)
        LEFT JOIN uncollected AS un ON un.bootstrap_room = r.bootstrap_room
        LEFT JOIN in_lost_lines AS ll ON ll.bootstrap_room = r.bootstrap_room
    )
),

-- Requests the prefill may still hold, judged against the timeout.
--   pin_start: from when it was surely past the prefill's waiting queue and still held:
--     L1: its Receive, unless the waiting queue (#queue-req) was non-empty in later samples; then
--         the first sample with an empty waiting queue (an empty waiting queue means it was scheduled);
--     L0: the decode's `Decode transfer failed` (decode had finished its handshake).
--   deadline = pin_start + timeout + grace: the watchdog should have released it by then.
--   prefill_status:
--     gone           the prefill incarnation holding it ended before the deadline
--     hidden         a hole on its prefill (suppression, parse failure, silence) covers the moment
--                    its deadline passed (pin_start + timeout .. deadline): its end may be in the
--                    hole, a dropped watchdog line included, whatever a later gauge shows; or a
--                    hole overlaps [pin_start, deadline] and no gauge sample a full timeout+grace
--                    after it shows it still held (undecided)
--     released       a later gauge sample shows every prefill queue empty: it left without a line,
--                    before the watchdog could fire (every DP rank of its prefill seen empty by then)
--     released_late  it left without a line, but the queues were first seen empty only once the
--                    watchdog could have fired: it may have been held to its deadline (undecided)
--     waiting_queue  open past the timeout, but the waiting queue never drained: it may still be
--                    waiting, not pinned (undecided)
--     young          the deadline is after the end of the evidence
--     no_prefill     no prefill line in the window, or several prefill hosts and no line naming
--                    it says which one holds it (undecided)
--     unnamed        past the deadline, the decode finished it and no prefill line names it
--                    while the prefill logged its requests: its lines are missing (undecided)
--     pinned         held past the deadline with nothing hiding its end: a silent pin
held_by_prefill AS MATERIALIZED (
    SELECT r.bootstrap_room, r.holder, r.p_recv_open AS p_recv, r.open_start, r.kv_arrived_by,
        -- at L0 the room may not name its prefill: with one prefill host it can only be that one,
        -- unless a line names another prefill whose own lines are absent (design.md, "Exists":
        -- nothing is attributed to an instance, or away from one, by elimination)
        -- nor when its room is another deployment's too (its prefill may be one not collected)
        -- nor before that prefill's first line: an instance not yet observed when it was handed
        -- off may be another one (a later deployment's, a file from another day)
        coalesce(r.p_host, CASE WHEN (SELECT count(*) FROM prefill_hosts) = 1
                                 AND (SELECT array_length(unobserved_prefills) FROM c) = 0 AND r.holder = ''
                                 AND r.open_start >= (SELECT min(start_t) FROM prefill_incarnations)
                                THEN (SELECT min(host) FROM prefill_hosts) END) AS host,
        (SELECT count(*) FROM prefill_hosts) AS n_prefill_hosts,
        -- the decode finished it and no prefill line names it: held past its deadline, it is
        -- a pin only the missing lines could name (undecided, never a silent pin)
        r.p_first IS NULL AND r.d_completed AS finished_unnamed
    FROM rs AS r
    WHERE r.prefill_may_hold
),
sampled AS (
    SELECT host, max(t_us) AS last_sample_t FROM ig GROUP BY host
),
pinc AS MATERIALIZED (
    -- prefill incarnations on the reference clock: a restart empties the queues, so only an empty
    -- sample of the incarnation holding a request says it left
    SELECT x.host, x.incarnation, x.start_t, lead(x.start_t) OVER (PARTITION BY x.host ORDER BY x.start_t) AS next_t
    FROM (SELECT unnest(incarnations, recursive := true) FROM c) AS x
    WHERE x.engine = 'prefill'
),
emptied AS (
    SELECT h.bootstrap_room, h.holder, max(g.last_empty_t) AS last_empty_t
    FROM held_by_prefill AS h
    JOIN gauge AS g ON g.host = h.host
    LEFT JOIN pinc AS i ON i.host = h.host AND i.incarnation = g.incarnation
    -- the incarnation it was received in (the first one, when it was received before any start)
    WHERE coalesce(i.next_t, 9223372036854775807) > h.open_start
      AND (i.start_t IS NULL OR i.start_t <= h.open_start OR i.incarnation = 1)
    GROUP BY h.bootstrap_room, h.holder
),
drain AS (
    SELECT h.bootstrap_room, h.holder, d.t_us AS first_drain_t
    FROM held_by_prefill AS h
    ASOF LEFT JOIN (SELECT host, t_us FROM ig WHERE queue_req = 0) AS d
      ON d.host = h.host AND h.p_recv <= d.t_us
),
-- every queue of one DP rank of a prefill seen empty (a batch line): a request that rank held had left
empties AS MATERIALIZED (
    SELECT host, dp_rank, t_us FROM ig WHERE pdf_nothing_held(floor, bootstrap_req, queue_req)
),
prefill_gone AS (
    SELECT h.bootstrap_room, h.holder, min(x.gone_t) AS gone_t
    FROM held_by_prefill AS h
    JOIN restarts AS x ON x.engine = 'prefill' AND x.host = h.host AND x.gone_t >= h.open_start
    GROUP BY h.bootstrap_room, h.holder
),
timed AS MATERIALIZED (
    SELECT h.*, d.first_drain_t, g.gone_t, sm.last_sample_t, e.last_empty_t,
        CASE
            WHEN h.p_recv IS NULL THEN h.open_start
            WHEN sm.last_sample_t IS NULL OR sm.last_sample_t < h.p_recv THEN h.p_recv
            -- the first empty waiting queue, or the decode's receipt of its KV, whichever is first
            ELSE least(d.first_drain_t, h.kv_arrived_by)
        END AS pin_start,
        least(c.end_t, g.gone_t) AS obs_end,
        c.stuck_us, c.timeout_us,
        -- no line and no operator says the timeout (the 300 s default): any moment of its hold may
        -- have been its deadline
        c.timeout_source = 'default' AS timeout_unknown
    FROM held_by_prefill AS h
    CROSS JOIN c
    LEFT JOIN drain AS d USING (bootstrap_room, holder)
    LEFT JOIN prefill_gone AS g USING (bootstrap_room, holder)
    LEFT JOIN sampled AS sm ON sm.host = h.host
    LEFT JOIN emptied AS e USING (bootstrap_room, holder)
),
left_by AS (
    -- the first moment after it was held (a second of margin, as for `released`) by which every DP
    -- rank of its prefill had been seen empty: whichever rank held it, it had left by then
    SELECT r.bootstrap_room, r.holder, CASE WHEN count(e.t_us) = count(*) THEN max(e.t_us) END AS left_by_t
    FROM (
        SELECT t.bootstrap_room, t.holder, t.host, k.dp_rank, coalesce(t.pin_start, t.p_recv) + 1000000 AS after_t
        FROM timed AS t
        JOIN (SELECT DISTINCT host, dp_rank FROM ig) AS k ON k.host = t.host
        WHERE t.last_empty_t IS NOT NULL
    ) AS r
    ASOF LEFT JOIN empties AS e ON e.host = r.host AND e.dp_rank = r.dp_rank AND e.t_us > r.after_t
    GROUP BY r.bootstrap_room, r.holder
),
hidden_by AS (
    -- holes on its prefill (not its stop: that is `gone`) within its hold:
    --   over_deadline: the hole covers the moment its deadline passed, from a second before the
    --                  timeout (1-s prefixes) to timeout + grace after pin_start, when the watchdog
    --                  would have fired: its line may be in the hole, whatever a later gauge shows
    --   hole_to_t:     the last such hole over [pin_start, deadline]: a normal end may be in it,
    --                  unless a gauge sample a full timeout + grace later still shows the queue
    SELECT t.bootstrap_room, t.holder, max(x.to_t) AS hole_to_t, list_sort(list(DISTINCT x.hole_id)) AS hole_ids,
        bool_or(x.to_t >= t.pin_start + CASE WHEN t.timeout_unknown THEN 0 ELSE t.timeout_us - 1000000 END) AS over_deadline
    FROM timed AS t
    JOIN holes AS x
      -- lost lines (suppression, parse failures, silence while traffic flowed), or a silence of
      -- the prefill that lasts to the window end; not its stop (that is `gone`)
      ON x.engine = 'prefill' AND x.kind <> 'engine_down' AND NOT coalesce(x.seen_after, false)
     AND (x.host = t.host OR x.host = '' OR t.host IS NULL)
     AND x.from_t <= least(t.pin_start + t.stuck_us, t.obs_end) AND x.to_t >= t.pin_start
    WHERE t.pin_start IS NOT NULL
    GROUP BY t.bootstrap_room, t.holder
),
po AS MATERIALIZED (
    -- left_unseen: it left the prefill with no line of its own (its queues were later seen empty)
    SELECT *, status IN ('released', 'released_late') AS left_unseen FROM (
        SELECT t.bootstrap_room, t.holder, t.host AS p_host_eff, t.pin_start, t.pin_start + t.stuck_us AS deadline, t.obs_end,
            t.gone_t AS p_gone_t, coalesce(lb.left_by_t, t.last_empty_t) AS p_left_by_t, hb.hole_ids,
            CASE
                -- no prefill line in the window, or several prefill hosts and no line says which holds it
                -- (past its deadline: a younger one is `young`, whoever holds it)
                WHEN (t.n_prefill_hosts = 0 OR t.host IS NULL)
                     AND NOT coalesce(t.pin_start + t.stuck_us > t.obs_end, false) THEN 'no_prefill'
                WHEN t.pin_start IS NOT NULL AND t.gone_t IS NOT NULL AND t.pin_start + t.stuck_us > t.gone_t THEN 'gone'
                WHEN t.pin_start IS NULL AND t.gone_t IS NOT NULL AND t.open_start + t.stuck_us > t.gone_t THEN 'gone'
                -- the moment its deadline passed is in a hole: whatever a later gauge shows, its end
                -- (a normal finish, or the watchdog's line) may be in there
                WHEN hb.over_deadline THEN 'hidden'
                -- a second of margin: the batch that scheduled it is excluded from its own sample's floor
                -- it left unseen; when the queues were first seen empty only once the watchdog could
                -- have fired (a second before the timeout, 1-s prefixes), it may have been held to its
                -- deadline (its end, perhaps the watchdog's line, is missing); with the timeout unknown
                -- the default's deadline (the verdict's rule on unknown timeouts covers shorter ones)
                WHEN t.last_empty_t > coalesce(t.pin_start, t.p_recv) + 1000000
                    THEN CASE WHEN t.pin_start IS NOT NULL
                               AND NOT coalesce(lb.left_by_t <= t.pin_start
                                       + CASE WHEN t.timeout_unknown THEN t.stuck_us ELSE t.timeout_us - 1000000 END, false)
                              THEN 'released_late' ELSE 'released' END
                WHEN t.pin_start IS NULL
                    THEN CASE WHEN t.obs_end - t.p_recv > t.stuck_us THEN 'waiting_queue' ELSE 'young' END
                WHEN t.pin_start + t.stuck_us > t.obs_end THEN 'young'
                WHEN hb.hole_to_t IS NOT NULL AND NOT coalesce(t.last_sample_t >= hb.hole_to_t + t.stuck_us, false) THEN 'hidden'
                WHEN t.finished_unnamed THEN 'unnamed'
                ELSE 'pinned'
            END AS status
        FROM timed AS t
        LEFT JOIN hidden_by AS hb USING (bootstrap_room, holder)
        LEFT JOIN left_by AS lb USING (bootstrap_room, holder)
    ) AS judged
),
decode_gone AS MATERIALIZED (
    -- decode-held (the prefill is done with it, or never saw it) and its decode incarnation ended
    SELECT b.bootstrap_room, b.holder, min(x.gone_t) AS d_gone_t
    FROM rs AS b JOIN restarts AS x
      ON x.engine = 'decode' AND x.gone_t >= b.decode_from
     -- its own decode's: one no line places is never given another's death by elimination, unless
     -- there is only one decode
     AND (x.host = b.d_host
          OR (b.d_host IS NULL AND NOT coalesce(b.d_unpaired, false) AND (SELECT count(*) FROM decode_hosts) = 1))
    WHERE NOT b.prefill_may_hold AND b.d_end IS NULL AND NOT b.d_completed AND b.decode_side_only
      AND (b.d_first IS NOT NULL OR (SELECT decode_logged FROM c))
    GROUP BY b.bootstrap_room, b.holder
),
-- Who holds it at the window end, and its life on the reference clock. `held`/`lived` are inlined
-- (a pass over rs with two small joins): `across` reads a narrow slice, `classed` the whole row.
held AS NOT MATERIALIZED (
    SELECT b.*, o.p_host_eff, o.status, o.p_gone_t, o.p_left_by_t, dg.d_gone_t, o.pin_start, o.deadline, o.hole_ids,
        coalesce(o.left_unseen, false) AS left_unseen,
        CASE
            WHEN b.prefill_may_hold AND o.status <> 'gone' AND NOT o.left_unseen THEN 'prefill'
            WHEN NOT b.prefill_may_hold AND b.d_end IS NULL AND NOT b.d_completed AND b.decode_side_only
                 AND (b.d_first IS NOT NULL OR c.decode_logged) AND dg.d_gone_t IS NULL THEN 'decode'
        END AS holder_at_end,
        least(coalesce(o.obs_end, c.end_t), coalesce(dg.d_gone_t, c.end_t)) AS open_until,
        least(b.p_first, b.d_first) AS life_start
    FROM rs AS b
    CROSS JOIN (SELECT end_t, decode_logged FROM c) AS c
    LEFT JOIN po AS o USING (bootstrap_room, holder)
    LEFT JOIN decode_gone AS dg USING (bootstrap_room, holder)
),
lived AS NOT MATERIALIZED (
    SELECT *,
        CASE WHEN holder_at_end IS NOT NULL OR status IN ('pinned', 'hidden', 'waiting_queue', 'young')
             THEN open_until
             ELSE greatest(p_last, d_last, p_gone_t, d_gone_t) END AS life_end
    FROM held
),
across AS (
    -- a restart of an engine that was not holding it, within its life; the holder's own restart
    -- makes it lost instead
    SELECT l.bootstrap_room, l.holder
    FROM lived AS l
    JOIN restarts AS x
      ON x.engine <> coalesce(l.holder_at_end, '')
     AND ((x.engine = 'prefill' AND x.host = coalesce(l.p_host, l.p_host_eff, x.host))
       OR (x.engine = 'decode' AND x.host = coalesce(l.d_host, x.host)))
     -- alive after the old process's last line: one the draining engine finished did not live across
     AND coalesce(x.gone_t, x.stop_t) < l.life_end AND coalesce(x.up_t, (SELECT end_t FROM c)) >= l.life_start
    WHERE NOT (x.engine = 'prefill' AND l.p_gone_t IS NOT NULL AND l.status = 'gone')
      AND NOT (x.engine = 'decode' AND l.d_gone_t IS NOT NULL)
    GROUP BY l.bootstrap_room, l.holder
),
classed AS (
    SELECT r.*,
        a.bootstrap_room IS NOT NULL AS across_restart,
        un.bootstrap_room IS NOT NULL AS prefill_uncollected,
        CASE
            WHEN r.wd_at IS NOT NULL OR r.wd_reason_at IS NOT NULL THEN 'watchdog_fired'
            WHEN r.status = 'pinned' THEN 'silent_pin'
            -- it may still be held and the logs cannot tell (see undecided_reason)
            WHEN r.status IN ('hidden', 'waiting_queue', 'no_prefill', 'unnamed') AND r.holder_at_end = 'prefill' THEN 'undecided'
            -- it left, but perhaps only once the watchdog could fire: held to its deadline or not, the logs cannot tell
            WHEN r.status = 'released_late' THEN 'undecided'
            WHEN r.any_failure THEN 'transfer_failed'
            -- a decode retraction (KV pool full) aborted it: neither a race nor a pin
            WHEN r.d_retracted_at IS NOT NULL THEN 'retracted'
            WHEN r.any_abort THEN 'aborted'
            -- the prefill's hold ended unseen: its incarnation ended holding it (whatever the
            -- decode did: the prefill never saw it end), or its queues were later empty before
            -- the decode finished it
            WHEN r.status = 'gone' OR (r.status = 'released' AND NOT r.d_completed) OR r.d_gone_t IS NOT NULL THEN 'lost'
            -- no prefill line in the window: the decode's Finish: proves the KV arrived, not that
            -- the prefill released its slot (design.md, "Held")
            WHEN r.d_completed AND (SELECT array_length(prefill_hosts) FROM c) = 0 THEN 'undecided'
            -- its room is another prefill's too, and no line says which decode side is its own
            WHEN r.d_unpaired THEN 'undecided'
            -- its prefill is named and was not collected: its Finish: says nothing of that hold
            WHEN r.d_completed AND un.bootstrap_room IS NOT NULL THEN 'undecided'
            WHEN r.d_completed THEN 'completed'
            -- no decode line in the window: the prefill's Finish: ended its hold, but whether the
            -- decode received and finished it (or holds it still) is not observed
            WHEN NOT (SELECT decode_logged FROM c) AND (r.p_done IS NOT NULL OR r.p_stats_at IS NOT NULL) THEN 'undecided'
            ELSE 'in_flight'
        END AS class,
        -- the prefill's own lines say where the abort hit; only when it never reported the room
        -- again does the decode's `Decode transfer failed` (past handshake) make it a race
        coalesce(r.p_xfer_abort, false)
            OR coalesce(r.p_abort_queue ILIKE '%inflight%', false)
            OR coalesce(r.p_finish_reason ILIKE 'Prefill transfer failed%abort%', false)
            OR (coalesce(r.d_xfer_abort, false) AND r.p_end IS NULL)
            AS abort_race
    FROM lived AS r
    LEFT JOIN across AS a USING (bootstrap_room, holder)
    LEFT JOIN uncollected AS un ON un.bootstrap_room = r.bootstrap_room AND r.p_first IS NULL
)
SELECT
    bootstrap_room,
    bootstrap_room::VARCHAR AS room,
    -- identity is (deployment, room): set when prefills of two deployments logged this room as
    -- their own (the prefill host whose request this row is); NULL when the room is one request
    nullif(holder, '') AS deployment,
    -- its room is another deployment's too, and no decode line says which decode side is its own
    d_unpaired AS decode_unpaired,
    prefill_rid, decode_rid, class,
    abort_race,
    CASE
        WHEN NOT abort_race THEN NULL
        WHEN class = 'silent_pin' THEN 'pinned'
        WHEN p_end IS NOT NULL OR left_unseen THEN 'released'
        WHEN status = 'gone' THEN 'gone with the prefill'
        ELSE 'open'
    END AS abort_race_outcome,
    across_restart, one_sided,
    -- dwell: time held by the prefill, measured as well as the evidence allows (dwell_basis)
    CASE
        WHEN class = 'watchdog_fired' AND wd_dwell_s IS NOT NULL THEN wd_dwell_s
        -- it left the queue unseen, somewhere before the queues were seen empty: no honest number
        WHEN left_unseen THEN NULL
        -- the line's own time may be truncated to the second (plain files): never below 0
        -- held: a hold ends at its holder's end, the holder's death or the window end, never at
        -- the holder's last line (a pin judged against the window end is held that long)
        WHEN p_inflight_entry IS NOT NULL
            THEN greatest(coalesce(p_end, greatest(open_until, p_inflight_entry)) - p_inflight_entry, 0) / 1e6
        WHEN p_recv_open IS NOT NULL
            THEN (coalesce(p_end, greatest(open_until, p_recv_open)) - p_recv_open) / 1e6
        -- from the decode's handshake only while a known prefill may hold it: otherwise it is made up
        WHEN prefill_may_hold AND pin_start IS NOT NULL AND coalesce(p_host, p_host_eff) IS NOT NULL
            THEN (greatest(open_until, pin_start) - pin_start) / 1e6
    END AS dwell_s,
    CASE
        WHEN class = 'watchdog_fired' AND wd_dwell_s IS NOT NULL THEN 'watchdog line'
        WHEN left_unseen THEN NULL
        WHEN p_inflight_entry IS NOT NULL THEN 'time stats (inflight entry)'
        WHEN p_recv_open IS NOT NULL THEN 'prefill Receive (upper bound)'
        WHEN prefill_may_hold AND pin_start IS NOT NULL AND coalesce(p_host, p_host_eff) IS NOT NULL THEN 'decode handshake done (lower bound)'
    END AS dwell_basis,
    evidence_level,
    -- the prefill may still hold it: stuck (a silent pin), or not decided either way
    coalesce(prefill_may_hold AND status IN ('pinned', 'young', 'hidden', 'waiting_queue', 'no_prefill', 'unnamed'), false) AS might_be_stuck,
    CASE
        WHEN status = 'hidden' THEN 'a hole on its prefill overlaps its watchdog deadline'
        WHEN status = 'released_late' THEN 'it left the prefill without a line, and its queues were first seen empty only once the watchdog could have fired: it may have been held to its deadline (its end, perhaps the watchdog''s line, is missing)'
        WHEN status = 'waiting_queue' THEN 'the prefill waiting queue (#queue-req) never drained after its Receive: it may still be waiting'
        -- its Receive: names a prefill whose lines are absent (an unobserved instance)
        WHEN class = 'undecided' AND prefill_uncollected AND d_completed
            THEN 'the decode finished it, but the prefill its Receive: names has no line in the data: whether that prefill released it is not seen'
        WHEN class = 'undecided' AND prefill_uncollected
            THEN 'the prefill its Receive: names has no line in the data: whether that prefill holds it still is not seen'
        WHEN status = 'no_prefill' THEN 'the decode says the prefill held it, but no prefill line shows which prefill, or whether it still does'
        WHEN status = 'unnamed' THEN 'the decode finished it, but no prefill line names it although the prefill logged its requests then: its prefill lines are missing, and no later sample shows the prefill''s queues empty'
        WHEN class = 'undecided' AND d_unpaired
            THEN 'another prefill logged this room as its own request too, and no decode line says which of them it served (its Receive: names an address both answer to, or none): which decode side is this one''s, and whether it finished, is not known'
        WHEN class = 'undecided' AND d_completed THEN 'the decode finished it, but no prefill line in the window shows whether the prefill released it'
        WHEN class = 'undecided' THEN 'the prefill handed it off, but no decode line in the window shows whether the decode received and finished it'
    END AS undecided_reason,
    CASE
        WHEN class <> 'lost' THEN NULL
        WHEN status = 'gone' THEN 'the prefill holding it stopped or restarted'
        WHEN status = 'released' THEN 'its end was not logged; the prefill queues were later empty'
        WHEN d_gone_t IS NOT NULL THEN 'the decode holding it stopped or restarted'
    END AS lost_reason,
    status AS prefill_status,
    holder_at_end,
    legs,
    coalesce(p_host, p_host_eff) AS p_host, d_host,
    life_start AS first_t, life_end AS last_t,
    p_recv AS prefill_received_t, d_recv AS decode_received_t,
    p_inflight_entry AS inflight_entry_t, p_bootstrap_done AS bootstrap_done_t,
    pin_start AS pinned_from_t, deadline AS watchdog_deadline_t,
    coalesce(p_done, p_stats_at) AS kv_done_t,
    coalesce(d_done, d_stats_at) AS decode_finished_t,
    d_end AS decode_end_t, p_end AS prefill_end_t,
    wd_at AS watchdog_fired_t, wd_dwell_s, wd_state, wd_ranks, wd_n_ranks, wd_timeout_s, wd_same_second,
    least(p_boot_failed, p_xfer_failed, d_hs_failed, d_xfer_failed) AS failed_t,
    least(p_abort_at, d_abort_at, p_abort_req_at) AS aborted_t,
    -- SGLang's own timeout ended it: the reason says which (bootstrap, waiting, MORI's SLA, ...)
    CASE WHEN upstream_timeout IS NOT NULL
         THEN 'upstream_timeout (' || upstream_timeout || '): ' || coalesce(p_reason, d_reason, '')
         ELSE coalesce(p_reason, d_reason) END AS reason,
    upstream_timeout,
    p_fail_ranks, d_fail_ranks, p_abort_queue,
    CASE
        WHEN NOT abort_race THEN NULL
        WHEN p_xfer_abort OR p_finish_reason ILIKE 'Prefill transfer failed%abort%'
            THEN 'Prefill transfer failed ... Aborted by AbortReq.: the abort hit the inflight queue'
        WHEN p_abort_queue ILIKE '%inflight%' THEN 'L3 "Abort inflight queue request."'
        ELSE 'Decode transfer failed ... abort: decode was past its handshake, and the prefill never reported the room again'
    END AS abort_evidence,
    p_gone_t, d_gone_t, hole_ids,
    -- it left the prefill unseen: by this sample (every queue of its prefill seen empty since) it had left
    CASE WHEN left_unseen THEN p_left_by_t END AS released_by_t
FROM classed
-- judged: what lives in the window (its last sign, or still open, at or after the window start)
WHERE coalesce(life_end, (SELECT end_t FROM c)) >= (SELECT start_t FROM c) OR holder_at_end IS NOT NULL;
