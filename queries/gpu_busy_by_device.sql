-- name: gpu_busy_by_device
-- returns: one row per (trace_id, device) plus one per trace for all devices: trace_id, device (NULL: all devices), span_ms, busy_ms, utilization
-- GPU busy time per device: the length of the union of that device's kernel, memcpy and
-- memset intervals (its streams overlap: never a plain sum), over the trace's span
-- (traces.duration_ns); utilization = busy / span. The row with device NULL is the union over
-- all devices together (the time at least one GPU was busy: the report's trace figure), not
-- a sum of the device rows. Device -1 collects GPU rows whose source names no device.
WITH g AS (
    SELECT trace_id, coalesce(device, -1) AS device, start_ns AS a, end_ns AS b
    FROM events
    WHERE kind IN ('kernel', 'memcpy', 'memset') AND end_ns > start_ns
), keyed AS (  -- every interval once per device and once for "all devices" (key NULL)
    SELECT trace_id, device AS dkey, a, b FROM g
    UNION ALL
    SELECT trace_id, NULL, a, b FROM g
), ordered AS (
    SELECT *, max(b) OVER (PARTITION BY trace_id, dkey ORDER BY a, b
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM keyed
), per_key AS (  -- union length = extent minus the gaps where an interval starts after all before
    SELECT trace_id, dkey,
           max(b) - min(a) - coalesce(sum(a - prev_end) FILTER (WHERE a > prev_end), 0) AS ns
    FROM ordered GROUP BY trace_id, dkey
)
SELECT p.trace_id, p.dkey AS device, t.duration_ns / 1e6 AS span_ms, p.ns / 1e6 AS busy_ms,
       p.ns / nullif(t.duration_ns, 0) AS utilization
FROM per_key p JOIN traces t USING (trace_id)
ORDER BY p.trace_id, p.dkey NULLS LAST;
