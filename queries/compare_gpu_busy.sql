-- name: compare_gpu_busy
-- returns: one row per trace: trace_id, span_ms, devices, busy_ms, requests, request_ms
-- Per trace: its span (traces.duration_ns), the GPU devices with activity, GPU busy time
-- (per device the length of the union of kernel/memcpy/memset intervals, streams overlap;
-- summed over devices: the definition of gpu_devices and gpu_utilization), and the request count and summed request wall time.
WITH iv AS (
    SELECT {'trace_id': trace_id, 'device': coalesce(device, -1)} AS key, start_ns, end_ns
    FROM events
    WHERE kind IN ('kernel', 'memcpy', 'memset')
), busy AS (  -- tk_union_ns: per device the length of the union of its intervals
    SELECT key.trace_id AS trace_id, count(*) AS devices, sum(union_ns) AS busy_ns
    FROM tk_union_ns('iv') GROUP BY 1
), req AS (
    SELECT trace_id, count(*) AS requests, sum(dur_ns) AS request_ns
    FROM requests GROUP BY trace_id
)
SELECT t.trace_id,
       coalesce(t.duration_ns, 0) / 1e6 AS span_ms,
       coalesce(b.devices, 0) AS devices,
       coalesce(b.busy_ns, 0) / 1e6 AS busy_ms,
       coalesce(r.requests, 0) AS requests,
       coalesce(r.request_ns, 0) / 1e6 AS request_ms
FROM traces t
LEFT JOIN busy b USING (trace_id)
LEFT JOIN req r USING (trace_id)
ORDER BY t.trace_id;
