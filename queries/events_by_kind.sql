-- name: events_by_kind
-- returns: one row per event kind: trace_id, kind, events, total_ms
-- param: $trace_id INTEGER trace to count
-- default: $trace_id 1
-- How many events of each kind a trace holds and their summed duration (overlaps counted
-- twice: this is a census, not busy time).
SELECT trace_id, kind, count(*) AS events, round(sum(dur_ns) / 1e6, 3) AS total_ms
FROM events
WHERE trace_id = $trace_id
GROUP BY trace_id, kind
ORDER BY count(*) DESC, kind
