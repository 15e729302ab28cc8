-- Fleets: one judgement per prefill instance (a prefill host), the window's verdict the worst.
-- pdforensics.verdict judges instance X by running every view above over the lines and events
-- of X's scope (temporary tables `lines` and `events` of the rows below win over the stored
-- tables), with the summaries (rooms, line_seconds, event_seconds) left empty so nothing folded
-- across instances is read. The scope of X (the variable pdf_instance):
--   * X's own prefill lines: its batch lines, requests, armed line, restarts;
--   * every line that names no request and is not another prefill's: decode and router batch
--     lines, restarts, journald's lines (a decode serves several prefills);
--   * the decode and router lines of X's requests: a request is X's when its `Receive:` names
--     one of X's addresses as `bootstrap_host` (the router puts the prefill's address in both
--     legs; X's addresses are those its own Receive: lines carry), or, when the line names none
--     or an unknown one, when X's prefill logged its room. A line naming another prefill's
--     address is never X's, whatever its room: rooms repeat (custom routers, n > 1).
-- A decode request no prefill instance can claim is judged in the whole window only.

-- Each prefill host and the addresses its requests name it by (its own Receive: lines).
CREATE OR REPLACE VIEW prefill_instances AS
SELECT coalesce(host, '') AS host,
    coalesce(list(DISTINCT bootstrap_host ORDER BY bootstrap_host) FILTER (
        WHERE event IN ('request_received', 'request_received_openai') AND bootstrap_host IS NOT NULL
          AND bootstrap_host <> '2.2.2.2'), []) AS addresses,
    count(*) AS events
FROM events
WHERE engine = 'prefill'
GROUP BY 1;

-- The request keys (engine, host, rid) of X's requests on the other engines.
CREATE OR REPLACE VIEW instance_requests AS
WITH
x AS (SELECT getvariable('pdf_instance')::VARCHAR AS host),
own AS MATERIALIZED (
    SELECT DISTINCT unnest(i.addresses) AS address FROM prefill_instances AS i, x WHERE i.host = x.host
    UNION SELECT host FROM x
),
foreign_address AS MATERIALIZED (
    SELECT DISTINCT unnest(i.addresses) AS address FROM prefill_instances AS i, x WHERE i.host <> x.host
    EXCEPT SELECT address FROM own
),
own_rooms AS MATERIALIZED (
    SELECT DISTINCT e.bootstrap_room FROM events AS e, x
    WHERE e.engine = 'prefill' AND coalesce(e.host, '') = x.host AND e.bootstrap_room IS NOT NULL
      AND e.bootstrap_room <> 0
),
-- a request (its rid on that engine and host) is decided on all its lines together: a Finish:
-- naming only the room is the request its Receive: named the prefill of
keyed AS (
    SELECT e.engine, coalesce(e.host, '') AS host, e.rid, e.bootstrap_room,
        e.bootstrap_host IN (SELECT address FROM own) AS names_own,
        e.bootstrap_host IN (SELECT address FROM foreign_address) AS names_foreign,
        e.bootstrap_room IN (SELECT bootstrap_room FROM own_rooms) AS own_room
    FROM events AS e
    WHERE coalesce(e.engine, '') <> 'prefill' AND (e.rid IS NOT NULL OR e.bootstrap_room IS NOT NULL)
)
SELECT engine, host, rid, NULL::UBIGINT AS bootstrap_room FROM keyed WHERE rid IS NOT NULL
GROUP BY engine, host, rid
HAVING bool_or(coalesce(names_own, false))
    OR (NOT bool_or(coalesce(names_foreign, false)) AND bool_or(coalesce(own_room, false)))
UNION ALL
SELECT DISTINCT engine, host, rid, bootstrap_room FROM keyed
WHERE rid IS NULL AND (coalesce(names_own, false) OR (coalesce(own_room, false) AND NOT coalesce(names_foreign, false)));

-- Each prefill host's side of a room two prefill hosts logged (two deployments numbering rooms
-- alike), its Receive: on the reference clock. X's scope hides the other prefills' lines, yet
-- their sides of X's rooms decide which decode side is X's (04_room_facts.sql, foreign_sides):
-- fleet.instance_scope reads them here, on the whole file, and hands them to the scope.
CREATE OR REPLACE VIEW shared_prefill_sides AS
WITH shared AS MATERIALIZED (
    SELECT bootstrap_room FROM events
    WHERE engine = 'prefill' AND event = 'request_received' AND bootstrap_room <> 0
    GROUP BY bootstrap_room HAVING count(DISTINCT host) > 1
)
-- (read from the events of those rooms alone, not from room_events: this runs once per instance)
SELECT e.bootstrap_room, o.host,
    min(e.ts_us - o.offset_us) FILTER (WHERE e.event = 'request_received') AS recv_t,
    coalesce(list(DISTINCT e.bootstrap_host ORDER BY e.bootstrap_host) FILTER (WHERE e.bootstrap_host IS NOT NULL), [])
        AS addresses
FROM events AS e
JOIN host_offsets AS o ON o.host = coalesce(e.host, '') AND e.ts_us >= o.lo_us AND e.ts_us <= o.hi_us
WHERE e.engine = 'prefill' AND e.bootstrap_room IN (SELECT bootstrap_room FROM shared)
  AND e.event IN ('request_received', 'request_finished', 'req_time_stats')
GROUP BY e.bootstrap_room, o.host;

CREATE OR REPLACE VIEW instance_events AS
WITH
x AS (SELECT getvariable('pdf_instance')::VARCHAR AS host),
claimed AS MATERIALIZED (SELECT * FROM instance_requests),
-- a request's lines are its rid's on that engine and host; a line with a room and no rid is
-- claimed by itself
by_rid AS MATERIALIZED (
    SELECT DISTINCT concat_ws('|', coalesce(engine, ''), host, rid) AS k FROM claimed WHERE rid IS NOT NULL
),
by_room AS MATERIALIZED (
    SELECT DISTINCT concat_ws('|', coalesce(engine, ''), host, bootstrap_room::VARCHAR) AS k FROM claimed WHERE rid IS NULL
)
SELECT e.* FROM events AS e, x
WHERE CASE
    WHEN e.engine = 'prefill' THEN coalesce(e.host, '') = x.host
    -- health checks are no one's requests: every instance sees its decodes'
    WHEN (e.rid IS NULL AND e.bootstrap_room IS NULL) OR e.bootstrap_room = 0
         OR coalesce(e.bootstrap_host, '') = '2.2.2.2' OR starts_with(coalesce(e.rid, ''), 'HEALTH_CHECK') THEN true
    WHEN e.rid IS NOT NULL THEN concat_ws('|', coalesce(e.engine, ''), coalesce(e.host, ''), e.rid) IN (SELECT k FROM by_rid)
    ELSE concat_ws('|', coalesce(e.engine, ''), coalesce(e.host, ''), e.bootstrap_room::VARCHAR) IN (SELECT k FROM by_room)
END;

CREATE OR REPLACE VIEW instance_lines AS
SELECT l.* FROM lines AS l
WHERE coalesce(l.engine, '') <> 'prefill' OR coalesce(l.host, '') = getvariable('pdf_instance')::VARCHAR;
