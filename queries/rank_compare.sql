-- name: rank_compare
-- returns: one row per GPU device of the trace (a rank): trace_id, device, rank, device_name, steps, step_ms, step_source, busy_ms, compute_ms, communication_ms, exposed_communication_ms, active_ms, idle_ms
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- The figures the cross-rank view compares, one row per device with GPU activity. rank =
-- traces.rank (Kineto distributedInfo) when the trace records one, else the device index (one
-- nsys export of several GPUs: each device is a rank). Steps: the trace's requests
-- (ProfilerStep#N, tracekit:request ...) run by the process that launched most of the
-- device's kernels (all the trace's requests where GPU rows name no process, as in Kineto);
-- step_ms is their mean duration, step_source their source ('window': no steps, each
-- working thread's window). On the device's kernels, copies and memsets: busy = union of all
-- (its gpu_islands); compute = union of its kernels outside the communication category
-- (tracekit/categories.toml); communication = union of its communication kernels; exposed =
-- union of all its kernels minus compute (communication no other kernel overlaps); active =
-- first start to last end of its activity (the device's active span); idle = active - busy.
WITH a AS (
    FROM tk_gpu_activity($trace_id)
), iv AS (
    SELECT {'device': device, 'set': 'comm'} AS key, start_ns, end_ns FROM a
    WHERE kind = 'kernel' AND category = 'communication'
    UNION ALL
    SELECT {'device': device, 'set': 'kernels'}, start_ns, end_ns FROM a WHERE kind = 'kernel'
    UNION ALL
    SELECT {'device': device, 'set': 'compute'}, start_ns, end_ns FROM a
    WHERE kind = 'kernel' AND category <> 'communication'
), u AS (
    SELECT key.device AS device,
           sum(union_ns) FILTER (WHERE key.set = 'comm') AS comm_ns,
           sum(union_ns) FILTER (WHERE key.set = 'kernels') AS kernels_ns,
           sum(union_ns) FILTER (WHERE key.set = 'compute') AS compute_ns
    FROM tk_union_ns('iv') GROUP BY 1
), busy AS (
    SELECT device, sum(end_ns - start_ns) AS busy_ns, min(start_ns) AS first_ns,
           max(end_ns) AS last_ns
    FROM gpu_islands WHERE trace_id = $trace_id GROUP BY device
), launcher AS (  -- the process that launched most of each device's activity (NULL: unnamed)
    SELECT a.device, mode(e.pid) AS pid
    FROM a JOIN events e ON e.trace_id = $trace_id AND e.event_id = a.event_id
    GROUP BY a.device
), steps AS (
    SELECT l.device, count(r.request_id) AS steps, avg(r.dur_ns) AS step_ns,
           min(r.source) AS step_source
    FROM launcher l
    JOIN requests r ON r.trace_id = $trace_id
     AND (l.pid IS NULL OR r.pid = l.pid
          OR NOT EXISTS (SELECT 1 FROM requests q WHERE q.trace_id = $trace_id AND q.pid = l.pid))
    GROUP BY l.device
)
SELECT $trace_id::INTEGER AS trace_id, b.device, coalesce(t.rank, b.device) AS rank,
       coalesce(n.device_name, 'GPU ' || b.device) AS device_name,
       coalesce(s.steps, 0) AS steps, s.step_ns / 1e6 AS step_ms, s.step_source,
       b.busy_ns / 1e6 AS busy_ms, coalesce(u.compute_ns, 0) / 1e6 AS compute_ms,
       coalesce(u.comm_ns, 0) / 1e6 AS communication_ms,
       (coalesce(u.kernels_ns, 0) - coalesce(u.compute_ns, 0)) / 1e6 AS exposed_communication_ms,
       (b.last_ns - b.first_ns) / 1e6 AS active_ms,
       (b.last_ns - b.first_ns - b.busy_ns) / 1e6 AS idle_ms
FROM busy b
JOIN traces t ON t.trace_id = $trace_id
LEFT JOIN u USING (device)
LEFT JOIN steps s USING (device)
LEFT JOIN tk_device_names($trace_id) n USING (device)
ORDER BY rank, b.device;
