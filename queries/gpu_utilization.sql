-- name: gpu_utilization
-- returns: trace_id, scope ('trace' | 'stage' | 'request'), name (stage name, request id, or 'trace'), request_id, windows, devices, window_ms, busy_ms, idle_ms, utilization
-- param: $trace_id INTEGER trace to measure
-- default: $trace_id 1
-- GPU busy/idle inside host windows: the whole trace span, each stage (its range instances,
-- summed) and each request. Per device, busy = length of the union of its GPU intervals
-- (kernel, memcpy, memset; all its streams together: tk_islands, so overlapping streams are
-- never counted twice) clipped to the window, whoever launched them. Over several devices the
-- figures are device-time: busy_ms = the sum of the devices' busy times, window_ms = window x
-- devices (the devices with any activity in the trace), utilization = busy / that; idle =
-- window - busy. One device: the plain window. The same definition as gpu_devices and diff.
WITH iv AS (
    SELECT coalesce(device, -1) AS key, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
), islands AS (
    FROM tk_islands('iv')
), ndev AS (
    SELECT greatest(count(DISTINCT key), 1) AS n FROM iv
), cum AS (  -- per device, busy time before each island starts (islands are disjoint)
    SELECT key, start_ns AS i0, end_ns AS i1,
           sum(end_ns - start_ns) OVER (PARTITION BY key ORDER BY start_ns
                                        ROWS UNBOUNDED PRECEDING) - (end_ns - start_ns) AS before
    FROM islands
), windows AS (
    SELECT 'trace' AS scope, 0 AS scope_order, 'trace' AS name, NULL::BIGINT AS request_id,
           0 AS wid, start_ns AS w0, start_ns + duration_ns AS w1, 0::BIGINT AS first_ns
    FROM traces WHERE trace_id = $trace_id
    UNION ALL
    SELECT 'stage', 1, stage, NULL, event_id, start_ns, end_ns, min(start_ns) OVER (PARTITION BY stage)
    FROM stages WHERE trace_id = $trace_id
    UNION ALL
    SELECT 'request', 2, request_id::VARCHAR, request_id, request_id, start_ns, end_ns, start_ns
    FROM requests WHERE trace_id = $trace_id
), points AS (  -- both ends of every window on every device
    SELECT w.scope, w.wid, d.key, -1 AS sign, w.w0 AS t
    FROM windows w CROSS JOIN (SELECT DISTINCT key FROM iv) d
    UNION ALL
    SELECT w.scope, w.wid, d.key, 1, w.w1
    FROM windows w CROSS JOIN (SELECT DISTINCT key FROM iv) d
), merged AS (  -- per device, islands and points in one sequence; an island sorts before a
    -- point at its start
    SELECT key, i0 AS t, 0 AS is_point, i0, i1, before,
           CAST(NULL AS VARCHAR) AS scope, CAST(NULL AS BIGINT) AS wid, 0 AS sign
    FROM cum
    UNION ALL
    SELECT key, t, 1, NULL, NULL, NULL, scope, wid, sign FROM points
), carried AS (  -- each point with its device's last island starting at or before it: islands
    -- are disjoint and in order, so their i0, i1 and before all grow and running maxima carry
    -- them (portable SQL in place of an as-of join, which Spark and Trino lack)
    SELECT is_point, scope, wid, sign, t,
           max(i0) OVER (PARTITION BY key ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS i0,
           max(i1) OVER (PARTITION BY key ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS i1,
           max(before) OVER (PARTITION BY key ORDER BY t, is_point ROWS UNBOUNDED PRECEDING)
               AS before
    FROM merged
), busy_at AS (  -- device busy time up to a point t
    SELECT scope, wid, sign * coalesce(before + least(greatest(t - i0, 0), i1 - i0), 0) AS ns
    FROM carried WHERE is_point = 1
), busy AS (
    SELECT scope, wid, sum(ns) AS ns FROM busy_at GROUP BY scope, wid
), per_window AS (
    SELECT w.*, (w.w1 - w.w0) * ndev.n AS window_ns, coalesce(b.ns, 0) AS busy_ns
    FROM windows w CROSS JOIN ndev LEFT JOIN busy b USING (scope, wid)
)
SELECT $trace_id::INTEGER AS trace_id, scope, name, min(request_id) AS request_id,
       count(*) AS windows, (SELECT n FROM ndev) AS devices,
       sum(window_ns) / 1e6 AS window_ms, sum(busy_ns) / 1e6 AS busy_ms,
       (sum(window_ns) - sum(busy_ns)) / 1e6 AS idle_ms,
       sum(busy_ns) / nullif(sum(window_ns), 0) AS utilization
FROM per_window
GROUP BY scope, scope_order, name
ORDER BY scope_order, min(first_ns), name;
