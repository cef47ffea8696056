-- name: gpu_devices
-- returns: one row per GPU device with activity: trace_id, device, device_name, streams, kernels, activities, busy_ms, active_ms, active_utilization, idle_before_ms, idle_after_ms, window_ms, utilization, activity_ms, kernel_ms, communication_ms, exposed_communication_ms, by_category_json (JSON object category -> ms)
-- param: $trace_id INTEGER trace to measure
-- default: $trace_id 1
-- Per device (tk_gpu_activity: kernels, memcpys, memsets; device -1 when the trace names none):
-- busy = length of the union of its activity intervals (the sum of its gpu_islands: streams
-- overlap, never a plain sum). active_ms = the device's ACTIVE span, its first to last GPU
-- activity, and active_utilization = busy / active_ms: the trace-wide headline figure.
-- window_ms = the capture (the trace's span, start-up and teardown included) and utilization
-- = busy / window: context only; idle_before_ms / idle_after_ms = the capture outside the
-- active span (start-up before the first activity, teardown after the last).
-- activity_ms = plain sum of activity durations, split by category in by_category_json (each
-- activity in exactly one category, so its values add up to activity_ms). communication_ms = union of the device's
-- communication kernels; exposed_communication_ms = the part of it with no other kernel
-- running on that device (union of all its kernels minus union of its other kernels).
WITH a AS (
    FROM tk_gpu_activity($trace_id)
), comm_devices AS (  -- exposed communication needs the two kernel unions only on these
    SELECT DISTINCT device FROM a WHERE kind = 'kernel' AND category = 'communication'
), busy AS (
    SELECT device, sum(end_ns - start_ns) AS busy_ns, min(start_ns) AS first_ns,
           max(end_ns) AS last_ns
    FROM gpu_islands WHERE trace_id = $trace_id GROUP BY device
), iv AS (
    SELECT {'device': device, 'set': 'comm'} AS key, start_ns, end_ns FROM a
    WHERE kind = 'kernel' AND category = 'communication'
    UNION ALL
    SELECT {'device': device, 'set': 'kernels'}, start_ns, end_ns FROM a
    WHERE kind = 'kernel' AND device IN (SELECT device FROM comm_devices)
    UNION ALL
    SELECT {'device': device, 'set': 'compute'}, start_ns, end_ns FROM a
    WHERE kind = 'kernel' AND category <> 'communication'
      AND device IN (SELECT device FROM comm_devices)
), u AS (
    SELECT key.device AS device,
           sum(union_ns) FILTER (WHERE key.set = 'comm') AS comm_ns,
           sum(union_ns) FILTER (WHERE key.set = 'kernels') AS kernels_ns,
           sum(union_ns) FILTER (WHERE key.set = 'compute') AS compute_ns
    FROM tk_union_ns('iv') GROUP BY 1
), per_cat AS (
    SELECT device, category, sum(dur_ns) AS ns FROM a GROUP BY ALL
), cats AS (
    SELECT device,
           '{' || string_agg(to_json(category)::VARCHAR || ':' || to_json(ns / 1e6)::VARCHAR,
                             ',' ORDER BY ns DESC, category) || '}' AS by_category_json
    FROM per_cat GROUP BY device
), d AS (
    SELECT device, count(DISTINCT stream) AS streams,
           count(*) FILTER (WHERE kind = 'kernel') AS kernels, count(*) AS activities,
           sum(dur_ns) AS activity_ns,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0) AS kernel_ns
    FROM a GROUP BY device
)
SELECT $trace_id::INTEGER AS trace_id, d.device,
       coalesce(n.device_name, CASE WHEN d.device >= 0 THEN 'GPU ' || d.device
                                    ELSE 'GPU (unnamed)' END) AS device_name,
       d.streams, d.kernels, d.activities,
       coalesce(b.busy_ns, 0) / 1e6 AS busy_ms, (b.last_ns - b.first_ns) / 1e6 AS active_ms,
       coalesce(b.busy_ns, 0) / nullif(b.last_ns - b.first_ns, 0) AS active_utilization,
       greatest(b.first_ns - t.start_ns, 0) / 1e6 AS idle_before_ms,
       greatest(t.start_ns + t.duration_ns - b.last_ns, 0) / 1e6 AS idle_after_ms,
       t.duration_ns / 1e6 AS window_ms,
       coalesce(b.busy_ns, 0) / nullif(t.duration_ns, 0) AS utilization,
       d.activity_ns / 1e6 AS activity_ms, d.kernel_ns / 1e6 AS kernel_ms,
       coalesce(u.comm_ns, 0) / 1e6 AS communication_ms,
       (coalesce(u.kernels_ns, 0) - coalesce(u.compute_ns, 0)) / 1e6 AS exposed_communication_ms,
       c.by_category_json
FROM d
JOIN traces t ON t.trace_id = $trace_id
LEFT JOIN busy b USING (device)
LEFT JOIN u USING (device)
LEFT JOIN cats c USING (device)
LEFT JOIN tk_device_names($trace_id) n USING (device)
ORDER BY d.device;
