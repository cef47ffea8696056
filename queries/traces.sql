-- name: traces
-- returns: one row per trace, by trace_id: trace_id, file (base name), format, tool_version, host, rank, span_ms
-- The traces a store holds: what `tracekit report` iterates over, and the ids other queries take
-- as $trace_id.
SELECT trace_id, regexp_extract(path, '[^/\\]+$') AS file, format, tool_version, host, rank,
       duration_ns / 1e6 AS span_ms
FROM traces
ORDER BY trace_id
