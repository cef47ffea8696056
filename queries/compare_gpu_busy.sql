-- name: compare_gpu_busy
-- returns: one row per trace: trace_id, format, span_ms, devices, busy_ms, requests, request_ms, kernels, cpu_ops, gpu_names
-- Per trace: its source format, span (traces.duration_ns), the GPU devices with activity, GPU
-- busy time (per device the length of the union of its kernel/memcpy/memset intervals, streams
-- overlap; summed over devices: device-time, the definition of gpu_devices and gpu_utilization;
-- per device: gpu_busy_by_device), the request count and summed request wall time ('window'
-- requests, a trace's whole span, are not counted), how many kernels and CPU ops it holds (diff
-- and check pick, per figure, the view of a run that has them), and the GPU model names the
-- trace records (traces.devices; '' when none).
WITH busy AS (  -- per device the length of the union of its intervals: its gpu_islands
    SELECT trace_id, count(DISTINCT device) AS devices, sum(end_ns - start_ns) AS busy_ns
    FROM gpu_islands GROUP BY trace_id
), req AS (
    SELECT trace_id, count(*) AS requests, sum(dur_ns) AS request_ns
    FROM requests WHERE source <> 'window' GROUP BY trace_id
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
       coalesce((SELECT string_agg(DISTINCT d->>'name', ', ' ORDER BY d->>'name')
                 FROM (SELECT unnest(CAST(t.devices AS JSON[])) AS d)
                 WHERE d->>'name' IS NOT NULL), '') AS gpu_names
FROM traces t
LEFT JOIN busy b USING (trace_id)
LEFT JOIN req r USING (trace_id)
LEFT JOIN kinds k USING (trace_id)
ORDER BY t.trace_id;
