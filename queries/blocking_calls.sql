-- name: blocking_calls
-- returns: one row per host call that can block the host on the GPU, longest first: trace_id, name, calls, total_ms, max_ms, stage (of the longest call)
-- param: $trace_id INTEGER trace to examine
-- param: $limit INTEGER how many call names
-- default: $trace_id 1
-- default: $limit 5
-- Runtime/driver calls that wait for the GPU or copy through the host: *Synchronize*
-- (cudaStreamSynchronize, hipDeviceSynchronize ...) and *Memcpy* (cudaMemcpy,
-- hipMemcpyWithStream, and cudaMemcpyAsync, which blocks for pageable host memory), grouped by
-- name; the evidence a low-utilization verdict names (which call, how long, in which stage).
WITH c AS (
    SELECT name, dur_ns, stage FROM events
    WHERE trace_id = $trace_id AND kind = 'runtime'
      AND (name ILIKE '%synchronize%' OR name ILIKE '%memcpy%')
)
SELECT $trace_id::INTEGER AS trace_id, name, count(*) AS calls, sum(dur_ns) / 1e6 AS total_ms,
       max(dur_ns) / 1e6 AS max_ms, arg_max(stage, dur_ns) AS stage
FROM c GROUP BY name
ORDER BY total_ms DESC, name
LIMIT $limit;
