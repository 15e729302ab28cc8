-- Failure lines (bootstrap/transfer/handshake failures, transfer errors, watchdog firings) counted by engine, event and reason
-- The reason is normalised (numbers -> N, quoted text -> '…') so one cause is one row; `rooms`
-- counts distinct requests, `lines` counts every TP rank's copy.
WITH failures AS (
    SELECT
        *,
        regexp_replace(
            regexp_replace(coalesce(reason, state, '(no reason)'), '''[^'']*''', '''…''', 'g'),
            '[0-9]+(\.[0-9]+)?', 'N', 'g') AS reason_shape
    FROM events
    WHERE event IN (
        'prefill_bootstrap_failed', 'prefill_transfer_failed', 'decode_handshake_failed',
        'decode_transfer_failed', 'transfer_error', 'watchdog_fired', 'session_failed',
        'lost_prefill', 'health_check_failed', 'scheduler_exception'
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
