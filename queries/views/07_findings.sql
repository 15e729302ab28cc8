-- Findings as tables: thin views over `requests` and the lists the `verdict` row carries.

-- Holes (and a too-short window), with the requests they overlap and whether they decide the
-- verdict (see 06_verdict.sql).
CREATE OR REPLACE VIEW coverage AS
SELECT unnest(coverage, recursive := true) FROM verdict;

-- Per prefill host: the inflight floor that never returned to 0, minus the requests lines name.
CREATE OR REPLACE VIEW anonymous_pins AS
SELECT unnest(anonymous_pin_rows, recursive := true) FROM verdict;

CREATE OR REPLACE VIEW abort_storms AS
SELECT unnest(abort_storms, recursive := true) FROM verdict;

CREATE OR REPLACE VIEW verdict_reasons AS
SELECT unnest(reason_rows, recursive := true) FROM verdict;

-- Every pin: requests the lines name (silent pins, watchdog firings, undecided ones) and the
-- anonymous ones from the gauge.
CREATE OR REPLACE VIEW pins AS
SELECT
    'request' AS kind, p_host AS host, room, prefill_rid, decode_rid, class,
    CASE
        WHEN class = 'silent_pin' THEN 'pinned past the timeout, no watchdog line'
        WHEN class = 'watchdog_fired' THEN 'released by the watchdog'
        ELSE 'undecided: ' || undecided_reason
    END AS outcome,
    1::BIGINT AS n, coalesce(pinned_from_t, prefill_received_t, first_t) AS since_t,
    dwell_s, dwell_basis, abort_race, across_restart
FROM requests
WHERE class IN ('silent_pin', 'watchdog_fired', 'undecided')
UNION ALL
SELECT
    'anonymous', host, NULL, NULL, NULL, NULL, 'the #inflight-req floor never returned to 0',
    anonymous_pins, pinned_since, (last_sample_t - pinned_since) / 1e6, 'gauge floor (lower bound)', NULL, NULL
FROM anonymous_pins
WHERE anonymous_pins > 0;

-- One row per request the watchdog force-failed, its TP ranks deduplicated. same_second: the patch
-- checks the deadline before the all-reduce, so every rank should fire in the same second. late:
-- the dwell exceeds the timeout by more than one poll loop (grace).
CREATE OR REPLACE VIEW watchdog_firings AS
SELECT unnest(watchdog_firing_rows, recursive := true) FROM verdict;

-- Abort races: an abort landed while the prefill side was in the inflight queue (see 05_requests.sql).
CREATE OR REPLACE VIEW abort_races AS
SELECT bootstrap_room, room, prefill_rid, decode_rid, class, abort_race_outcome AS outcome,
    abort_evidence AS evidence, aborted_t, prefill_end_t, dwell_s, dwell_basis, evidence_level
FROM requests
WHERE abort_race;

-- A request's timeline, one row per phase and engine, as far as the evidence shows it;
-- basis says how sure the time is: an exact line, time stats, or a bound.
CREATE OR REPLACE VIEW request_phases AS
SELECT bootstrap_room, room, p.phase, p.engine, p.t_us, p.basis
FROM (
    SELECT bootstrap_room, room, unnest([
        {'phase': 'received', 'engine': 'prefill', 't_us': prefill_received_t, 'basis': 'Receive: line'},
        {'phase': 'received', 'engine': 'decode', 't_us': decode_received_t, 'basis': 'Receive: line'},
        {'phase': 'bootstrap_done', 'engine': 'prefill', 't_us': bootstrap_done_t, 'basis': 'time stats'},
        {'phase': 'inflight_entry', 'engine': 'prefill', 't_us': inflight_entry_t, 'basis': 'time stats'},
        {'phase': 'inflight_entry', 'engine': 'prefill',
         't_us': CASE WHEN inflight_entry_t IS NULL AND wd_dwell_s IS NOT NULL
                      THEN watchdog_fired_t - (wd_dwell_s * 1e6)::BIGINT END,
         'basis': 'watchdog dwell'},
        {'phase': 'pinned_from', 'engine': 'prefill', 't_us': pinned_from_t,
         'basis': 'surely past the waiting queue (Receive, a drained #queue-req, or the decode handshake)'},
        {'phase': 'watchdog_deadline', 'engine': 'prefill', 't_us': watchdog_deadline_t, 'basis': 'pinned_from + timeout + grace'},
        {'phase': 'kv_done', 'engine': 'prefill', 't_us': kv_done_t, 'basis': 'prefill Finish: / time stats'},
        {'phase': 'watchdog_fired', 'engine': 'prefill', 't_us': watchdog_fired_t, 'basis': 'watchdog line'},
        {'phase': 'failed', 'engine': NULL, 't_us': failed_t, 'basis': 'failure line'},
        {'phase': 'aborted', 'engine': NULL, 't_us': aborted_t, 'basis': 'abort line'},
        {'phase': 'finished', 'engine': 'decode', 't_us': decode_finished_t, 'basis': 'decode Finish: / time stats'},
        {'phase': 'engine_gone', 'engine': 'prefill', 't_us': p_gone_t, 'basis': 'last line of the prefill process'},
        {'phase': 'engine_gone', 'engine': 'decode', 't_us': d_gone_t, 'basis': 'last line of the decode process'}
    ]) AS p
    FROM requests
) AS x
WHERE p.t_us IS NOT NULL;
