-- Thin views over `context`: each is one of its facts, as a table.

CREATE OR REPLACE VIEW settings AS
SELECT * EXCLUDE (host_offsets, incarnations, engine_restarts, host_gauge, holes, engine_coverage, prefill_hosts,
                  abort_rooms, prefill_tp_ranks, observed, prefill_evidence, frozen_queues,
                  logging_changes, decode_evidence, unobserved_prefills)
FROM context;

CREATE OR REPLACE VIEW watchdog AS
SELECT deployed, deployed_basis, timeout_s, timeout_source, armed_lines, armed_at_us, firing_lines, grace_s
FROM context;

CREATE OR REPLACE VIEW clock_window AS
SELECT start_t, end_t, start_us, end_us FROM context;

-- Per-host clock offsets (reference clock = the busiest prefill host): t = ts_us - offset_us.
CREATE OR REPLACE VIEW host_offsets AS
SELECT unnest(host_offsets, recursive := true) FROM context;

CREATE OR REPLACE VIEW incarnations AS
SELECT unnest(incarnations, recursive := true) FROM context;

CREATE OR REPLACE VIEW engine_restarts AS
SELECT unnest(engine_restarts, recursive := true) FROM context;

-- Per prefill host and incarnation: the inflight floor that never came back down (pinned_floor,
-- since pinned_since), the final floor above it (open_floor), when the queues were last seen empty.
CREATE OR REPLACE VIEW host_gauge AS
SELECT unnest(host_gauge, recursive := true) FROM context;

CREATE OR REPLACE VIEW holes AS
SELECT unnest(holes, recursive := true) FROM context;

CREATE OR REPLACE VIEW engine_coverage AS
SELECT unnest(engine_coverage, recursive := true) FROM context;

-- What each engine's stats lines showed of its queues in the window (`verdict --json`'s `observed`).
CREATE OR REPLACE VIEW observed AS
SELECT unnest(observed, recursive := true) FROM context;

-- Queues other than the prefill inflight queue frozen at a non-zero value past timeout + grace.
CREATE OR REPLACE VIEW frozen_queues AS
SELECT * EXCLUDE (sample_ts) FROM (SELECT unnest(frozen_queues, recursive := true) FROM context);

CREATE OR REPLACE VIEW evidence AS
SELECT evidence_level FROM context;

-- Prefill instances some line names whose own lines are absent (design.md, "Exists"): the decode's
-- bootstrap_host, router lines naming a prefill worker.
CREATE OR REPLACE VIEW unobserved_instances AS
SELECT unnest(unobserved_prefills, recursive := true) FROM context;
