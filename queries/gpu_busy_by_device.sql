-- name: gpu_busy_by_device
-- returns: one row per (trace_id, device) plus one per trace for all devices: trace_id, device (NULL: all devices), devices, span_ms, busy_ms, utilization
-- GPU busy time per device over every trace at once: the length of the union of that device's
-- kernel, memcpy and memset intervals (the sum of its gpu_islands: its streams overlap, never
-- a plain sum), over the trace's span (traces.duration_ns); utilization = busy / span. The
-- row with device NULL sums the devices (device-time, as gpu_utilization and gpu_devices
-- count it): busy_ms is the sum of the device rows and span_ms the span times the devices,
-- so its utilization is the devices' mean. Device -1 collects GPU rows whose source names no device.
WITH per_device AS (
    SELECT trace_id, device, sum(end_ns - start_ns) AS ns FROM gpu_islands GROUP BY ALL
), keyed AS (
    SELECT trace_id, device, 1 AS devices, ns FROM per_device
    UNION ALL
    SELECT trace_id, NULL, count(*), sum(ns) FROM per_device GROUP BY trace_id
)
SELECT k.trace_id, k.device, k.devices, k.devices * t.duration_ns / 1e6 AS span_ms,
       k.ns / 1e6 AS busy_ms, k.ns / nullif(k.devices * t.duration_ns, 0) AS utilization
FROM keyed k JOIN traces t USING (trace_id)
ORDER BY k.trace_id, k.device NULLS LAST;
