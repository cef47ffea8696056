-- name: compare_ops
-- returns: one row per (name, shape): name, shape, count, total_ms, self_ms
-- CPU operators over every trace in the store, keyed by name and input shapes (Kineto
-- args 'Input Dims' as compact JSON text; '' when the source has none), for tracekit diff.
-- total_ms is inclusive time (dur), self_ms excludes direct children.
SELECT name,
       coalesce(json_extract_string(args, '$."Input Dims"'), '') AS shape,
       count(*) AS count,
       sum(dur_ns) / 1e6 AS total_ms,
       coalesce(sum(self_ns), 0) / 1e6 AS self_ms
FROM events
WHERE kind = 'cpu_op'
GROUP BY 1, 2
ORDER BY total_ms DESC, name, shape;
