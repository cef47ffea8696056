-- name: range_count
-- returns: one row per trace: trace_id, ranges
-- param: $range_name VARCHAR range name to count (exact: an NVTX message, domain:message, or record_function name)
-- default: $range_name tracekit:request
-- How many host ranges (NVTX ranges, Kineto user annotations) named $range_name each trace holds:
-- the iterations `tracekit diff --per NAME` normalizes ops and kernels by.
SELECT t.trace_id, count(e.event_id) AS ranges
FROM traces t
LEFT JOIN events e ON e.trace_id = t.trace_id AND e.kind = 'range' AND e.name = $range_name
GROUP BY t.trace_id
ORDER BY t.trace_id;
