-- name: compare_gpu_busy
-- returns: one row per trace: trace_id, format, span_ms, devices, busy_ms, requests, request_ms, kernels, cpu_ops, gpu_names
-- Per trace: its source format, span (traces.duration_ns), the GPU devices with activity, GPU
-- busy time (the union of kernel/memcpy/memset intervals over all devices together: the time
-- at least one GPU was busy, as the report says; per device: gpu_busy_by_device), the request
-- count and summed request wall time, and how many kernels and CPU ops it holds (diff and
-- check pick, per figure, the view of a run that has them), and the GPU model names the
-- trace records (traces.devices; '' when none).
WITH g AS (
    SELECT trace_id, start_ns AS a, end_ns AS b, device
    FROM events
    WHERE kind IN ('kernel', 'memcpy', 'memset') AND end_ns > start_ns
), ordered AS (
    SELECT *, max(b) OVER (PARTITION BY trace_id ORDER BY a, b
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM g
), busy AS (
    SELECT trace_id, count(DISTINCT coalesce(device, -1)) AS devices,
           max(b) - min(a) - coalesce(sum(a - prev_end) FILTER (WHERE a > prev_end), 0) AS busy_ns
    FROM ordered GROUP BY trace_id
), req AS (
    SELECT trace_id, count(*) AS requests, sum(dur_ns) AS request_ns
    FROM requests GROUP BY trace_id
), kinds AS (
    SELECT trace_id, count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           count(*) FILTER (WHERE kind = 'cpu_op') AS cpu_ops
    FROM events GROUP BY trace_id
)
SELECT t.trace_id, t.format,
       coalesce(t.duration_ns, 0) / 1e6 AS span_ms,
       coalesce(b.devices, 0) AS devices,
       coalesce(b.busy_ns, 0) / 1e6 AS busy_ms,
       coalesce(r.requests, 0) AS requests,
       coalesce(r.request_ns, 0) / 1e6 AS request_ms,
       coalesce(k.kernels, 0) AS kernels,
       coalesce(k.cpu_ops, 0) AS cpu_ops,
       coalesce((SELECT string_agg(DISTINCT n, ', ' ORDER BY n)
                 FROM (SELECT unnest(json_extract_string(t.devices, '$[*].name')) AS n)
                 WHERE n IS NOT NULL), '') AS gpu_names
FROM traces t
LEFT JOIN busy b USING (trace_id)
LEFT JOIN req r USING (trace_id)
LEFT JOIN kinds k USING (trace_id)
ORDER BY t.trace_id;
