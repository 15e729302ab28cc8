-- Failure lines (bootstrap/transfer/handshake failures, transfer errors, watchdog firings, engine deaths) counted by engine, event and reason
-- The reason is normalised so one cause is one row and stays readable: quoted text -> '…', 0x.. ->
-- <hex>, ip(:port) -> <addr>, 8+ digit numbers (rooms) -> <room>, 8+ hex digits (rids) -> <rid>,
-- other numbers -> N (the same chain as the report's failures table); `rooms` counts distinct
-- requests, `lines` counts every TP rank's copy.
WITH failures AS (
    SELECT
        *,
        regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
            coalesce(reason, state, '(no reason)'),
            '''[^'']*''', '''…''', 'g'),
            '\b0x[0-9a-fA-F]+\b', '<hex>', 'g'),
            '\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b', '<addr>', 'g'),
            '\b\d{8,}\b', '<room>', 'g'),
            '\b[0-9a-fA-F]{8,}\b', '<rid>', 'g'),
            '\d+(\.\d+)?', 'N', 'g') AS reason_shape
    FROM events
    WHERE event IN (
        'prefill_bootstrap_failed', 'prefill_transfer_failed', 'decode_handshake_failed',
        'decode_transfer_failed', 'transfer_error', 'watchdog_fired', 'session_failed',
        'lost_prefill', 'health_check_failed', 'engine_died', 'decode_watchdog_fired',
        'rebootstrap_failed', 'retract_abort'
    )
)
SELECT
    engine,
    event,
    reason_shape AS reason,
    count(DISTINCT bootstrap_room) AS rooms,
    count(*) AS lines,
    make_timestamp(min(ts_us)) AS first_utc,
    make_timestamp(max(ts_us)) AS last_utc,
    left(any_value(coalesce(reason, state) ORDER BY line_id), 200) AS sample_reason
FROM failures
GROUP BY engine, event, reason_shape
ORDER BY rooms DESC, lines DESC, engine, event, reason;
