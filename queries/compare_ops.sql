-- name: compare_ops
-- returns: one row per (trace_id, name, shape): trace_id, name, shape, count, total_ms, sq_ms2, max_ms, self_ms
-- CPU operators over every trace in the store, keyed by name and input shapes (Kineto
-- args 'Input Dims' as compact JSON text; '' when the source has none), for tracekit diff.
-- total_ms is inclusive time (dur, what torch.profiler calls CPU total): diff compares it
-- per call, since an op's wait (a sync inside aten::item) is in its children; sq_ms2 is the
-- sum of squared durations (ms²), for the noise of a per-call change; self_ms excludes
-- direct children.
SELECT trace_id, name,
       coalesce(json_extract_string(args, '$."Input Dims"'), '') AS shape,
       count(*) AS count,
       sum(dur_ns) / 1e6 AS total_ms,
       sum((dur_ns / 1e6) * (dur_ns / 1e6)) AS sq_ms2,
       max(dur_ns) / 1e6 AS max_ms,
       coalesce(sum(self_ns), 0) / 1e6 AS self_ms
FROM events
WHERE kind = 'cpu_op'
GROUP BY ALL
ORDER BY trace_id, total_ms DESC, name, shape;
