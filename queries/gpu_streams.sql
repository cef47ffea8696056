-- name: gpu_streams
-- returns: one row per GPU device and stream: trace_id, device, stream, activities, busy_ms, share_of_device_busy, utilization, top_category
-- param: $trace_id INTEGER trace to measure
-- default: $trace_id 1
-- Per (device, stream): busy = length of the union of its kernel/memcpy/memset intervals
-- (tk_union_ns; on a device with one stream that is the device's busy time, the sum of its
-- gpu_islands), its share of the device's busy time (streams of one device overlap, so the
-- shares can add up to more than 100%), utilization = busy / trace span, and the category
-- with the most activity time on that stream.
WITH a AS (
    FROM tk_gpu_activity($trace_id)
), multi AS (  -- devices whose busy time is not one stream's: only they need stream unions
    SELECT device FROM a GROUP BY device
    HAVING count(DISTINCT stream) > 1 OR (count(stream) > 0 AND count(stream) < count(*))
), device_busy AS (
    SELECT device, sum(end_ns - start_ns) AS union_ns FROM gpu_islands
    WHERE trace_id = $trace_id GROUP BY device
), iv AS (
    SELECT {'device': device, 'stream': stream} AS key, start_ns, end_ns FROM a
    WHERE device IN (SELECT device FROM multi)
), u AS (
    SELECT key.device AS device, key.stream AS stream, union_ns, n FROM tk_union_ns('iv')
    UNION ALL  -- one stream: the device's islands (n as tk_union_ns counts: non-empty ones)
    SELECT s.device, s.stream, b.union_ns, s.n
    FROM (SELECT device, any_value(stream) AS stream,
                 count(*) FILTER (WHERE end_ns > start_ns) AS n
          FROM a WHERE device NOT IN (SELECT device FROM multi) GROUP BY device) s
    JOIN device_busy b USING (device)
), top_cat AS (
    SELECT device, stream, arg_max(category, ns) AS top_category
    FROM (SELECT device, stream, category, sum(dur_ns) AS ns FROM a GROUP BY ALL)
    GROUP BY ALL
)
SELECT $trace_id::INTEGER AS trace_id, s.device, s.stream, s.n AS activities,
       s.union_ns / 1e6 AS busy_ms, s.union_ns / nullif(dv.union_ns, 0) AS share_of_device_busy,
       s.union_ns / nullif(t.duration_ns, 0) AS utilization, c.top_category
FROM u s
JOIN device_busy dv ON dv.device = s.device
JOIN traces t ON t.trace_id = $trace_id
LEFT JOIN top_cat c ON c.device = s.device AND c.stream IS NOT DISTINCT FROM s.stream
WHERE s.stream IS NOT NULL OR NOT EXISTS (FROM a WHERE a.device = s.device AND a.stream IS NOT NULL)
ORDER BY s.device, s.union_ns DESC, s.stream;
