-- name: compare_gpu_busy
-- returns: one row per trace: trace_id, span_ms, devices, busy_ms, requests, request_ms
-- Per trace: its span (traces.duration_ns), the GPU devices with activity, GPU busy time
-- (per device the length of the union of kernel/memcpy/memset intervals, streams overlap;
-- summed over devices), and the request count and summed request wall time.
WITH g AS (
    SELECT trace_id, coalesce(device, -1) AS device, start_ns AS a, end_ns AS b
    FROM events
    WHERE kind IN ('kernel', 'memcpy', 'memset') AND end_ns > start_ns
), ordered AS (
    SELECT *, max(b) OVER (PARTITION BY trace_id, device ORDER BY a, b
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g
), per_device AS (  -- union length = span minus the gaps where an interval starts after all before
    SELECT trace_id, device,
           max(b) - min(a) - coalesce(sum(a - prev_end) FILTER (WHERE a > prev_end), 0) AS ns
    FROM ordered GROUP BY trace_id, device
), busy AS (
    SELECT trace_id, count(*) AS devices, sum(ns) AS busy_ns FROM per_device GROUP BY trace_id
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
