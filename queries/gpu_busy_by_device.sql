-- name: gpu_busy_by_device
-- returns: one row per (trace_id, device) plus one per trace for all devices: trace_id, device (NULL: all devices), devices, span_ms, busy_ms, utilization
-- GPU busy time per device over every trace at once: the length of the union of that device's
-- kernel, memcpy and memset intervals (the sum of its gpu_islands: its streams overlap, never
-- a plain sum), over the device's ACTIVE span (its first to last GPU activity, as
-- gpu_devices.active_ms: start-up and teardown are not idle); utilization = busy / span. The
-- row with device NULL sums the devices (device-time, as gpu_utilization and gpu_devices
-- count it): busy_ms is the sum of the device rows and span_ms the sum of their active spans. Device -1 collects GPU rows whose source names no device.
WITH per_device AS (
    SELECT trace_id, device, sum(end_ns - start_ns) AS ns, max(end_ns) - min(start_ns) AS span_ns
    FROM gpu_islands GROUP BY ALL
), keyed AS (
    SELECT trace_id, device, 1 AS devices, ns, span_ns FROM per_device
    UNION ALL
    SELECT trace_id, NULL, count(*), sum(ns), sum(span_ns) FROM per_device GROUP BY trace_id
)
SELECT k.trace_id, k.device, k.devices, k.span_ns / 1e6 AS span_ms,
       k.ns / 1e6 AS busy_ms, k.ns / nullif(k.span_ns, 0) AS utilization
FROM keyed k
ORDER BY k.trace_id, k.device NULLS LAST;
