-- name: stage_attributes
-- returns: one row per (stage range, numeric attribute): trace_id, stage, event_id, request_id, dur_ms, key, value
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- Numeric attributes recorded on stage ranges (table attributes, keyed by the stage's range
-- event_id: e.g. seq_len, batch_size) next to the stage's duration, to see whether a stage's
-- time grows with its input. Non-numeric values are left out.
SELECT s.trace_id, s.stage, s.event_id, s.request_id, s.dur_ns / 1e6 AS dur_ms, a.key,
       try_cast(a.value AS DOUBLE) AS value
FROM stages s
JOIN attributes a ON a.trace_id = s.trace_id AND a.event_id = s.event_id
WHERE s.trace_id = $trace_id AND try_cast(a.value AS DOUBLE) IS NOT NULL
ORDER BY s.stage, a.key, s.start_ns;
