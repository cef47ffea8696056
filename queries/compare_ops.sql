-- name: compare_ops
-- returns: one row per (trace_id, name, shape): trace_id, name, shape, count, total_ms, self_ms, self_sq_ms2, self_max_ms
-- CPU operators over every trace in the store, keyed by name and input shapes (Kineto
-- args 'Input Dims' as compact JSON text; '' when the source has none), for tracekit diff.
-- total_ms is inclusive time (dur); self_ms excludes direct children, and is what diff
-- compares per call (a parent and its child are not both charged for one change);
-- self_sq_ms2 is the sum of squared self times (ms²), for the noise of a per-call change.
SELECT trace_id, name,
       coalesce(json_extract_string(args, '$."Input Dims"'), '') AS shape,
       count(*) AS count,
       sum(dur_ns) / 1e6 AS total_ms,
       coalesce(sum(self_ns), 0) / 1e6 AS self_ms,
       coalesce(sum((self_ns / 1e6) * (self_ns / 1e6)), 0) AS self_sq_ms2,
       coalesce(max(self_ns), 0) / 1e6 AS self_max_ms
FROM events
WHERE kind = 'cpu_op'
GROUP BY ALL
ORDER BY trace_id, self_ms DESC, name, shape;
