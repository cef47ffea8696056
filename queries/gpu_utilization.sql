-- name: gpu_utilization
-- returns: trace_id, scope ('trace' | 'active' | 'stage' | 'request'), name (stage name, request id, 'capture' or 'active span'), request_id, windows, devices, window_ms, busy_ms, idle_ms, utilization
-- param: $trace_id INTEGER trace to measure
-- default: $trace_id 1
-- GPU busy/idle inside named windows: 'trace' = the whole capture (start-up and teardown
-- included: context only), 'active' = the GPU's active span (first to last GPU activity on any
-- device: the trace-wide figure), each stage (its range instances, summed) and each request
-- (its latency window: from its start to the later of its host end and the end of the GPU
-- work it launched, tk_gpu_ends). Per device, busy = length of the union of its GPU intervals
-- (kernel, memcpy, memset; all its streams together, so overlapping streams are never counted
-- twice: its gpu_islands, read by tk_busy_upto_islands at the window's ends) clipped to the
-- window, whoever launched them.
-- Over several devices the figures are device-time: busy_ms = the sum of the devices' busy times, window_ms = window x
-- devices (the devices with any activity in the trace), utilization = busy / that; idle =
-- window - busy. One device: the plain window. The same definition as gpu_devices and diff.
WITH isl AS (
    SELECT device AS key, island, start_ns, end_ns, busy_before_ns FROM gpu_islands
    WHERE trace_id = $trace_id
), devices AS (
    SELECT DISTINCT coalesce(device, -1) AS key FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
), ndev AS (
    SELECT greatest(count(*), 1) AS n FROM devices
), windows AS (
    SELECT 'trace' AS scope, 0 AS scope_order, 'capture' AS name, NULL::BIGINT AS request_id,
           0 AS wid, start_ns AS w0, start_ns + duration_ns AS w1, 0::BIGINT AS first_ns
    FROM traces WHERE trace_id = $trace_id
    UNION ALL
    SELECT 'active', 1, 'active span', NULL, 0, min(start_ns), max(end_ns), 0::BIGINT
    FROM isl HAVING count(*) > 0
    UNION ALL
    SELECT 'stage', 2, stage, NULL, event_id, start_ns, end_ns, min(start_ns) OVER (PARTITION BY stage)
    FROM stages WHERE trace_id = $trace_id
    UNION ALL
    -- a request's window is its latency: to the later of its host end and its GPU work's end
    SELECT 'request', 3, r.request_id::VARCHAR, r.request_id, r.request_id, r.start_ns,
           greatest(r.end_ns, coalesce(g.gpu_end_ns, r.end_ns)), r.start_ns
    FROM requests r
    LEFT JOIN tk_gpu_ends() g
      ON g.trace_id = r.trace_id AND g.request_id = r.request_id AND g.stage IS NULL
    WHERE r.trace_id = $trace_id
), ends AS (  -- both ends of every window on every device
    SELECT w.scope, w.scope_order, w.wid, d.key, -1 AS sign, w.w0 AS t
    FROM windows w CROSS JOIN devices d
    UNION ALL
    SELECT w.scope, w.scope_order, w.wid, d.key, 1, w.w1
    FROM windows w CROSS JOIN devices d
), points AS (  -- a unique id per key from what the point is (a row number would sort them)
    SELECT *, (wid * 4 + scope_order) * 2 + (sign + 1) // 2 AS point_id FROM ends
), busy AS (  -- per window: busy up to its end minus busy up to its start, over devices
    SELECT p.scope, p.wid, sum(p.sign * b.busy_ns) AS ns
    FROM points p JOIN tk_busy_upto_islands('isl', 'points') b USING (key, point_id)
    GROUP BY p.scope, p.wid
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
