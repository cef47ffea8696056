-- name: launch_overhead
-- returns: one row per runtime API name that launched GPU work, then '(all runtime)': trace_id, api, calls, api_ms, mean_api_us, gpu_events, gpu_ms, queue_p50_us, queue_p99_us, queue_max_us, queue_clamped
-- param: $trace_id INTEGER trace to measure
-- default: $trace_id 1
-- Host time spent in CUDA runtime/driver calls against the GPU time of the work they
-- launched. Queue delay = GPU start - end of the launching call, clamped at 0: a GPU start
-- before the call returned (host and GPU timestamps come from different clocks, or the call
-- returned late) is never printed negative; queue_clamped counts those GPU events (the flag).
-- Percentiles are quantile_cont over launched GPU events. The
-- '(all runtime)' row counts every runtime call, launching or not (synchronize included).
WITH rt AS (
    SELECT event_id, name, dur_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND kind = 'runtime'
), g AS (
    SELECT r.name AS api, e.dur_ns, greatest(e.start_ns - r.end_ns, 0) AS queue_ns,
           e.start_ns < r.end_ns AS clamped
    FROM events e JOIN rt r ON r.event_id = e.launch_id
    WHERE e.trace_id = $trace_id AND e.kind IN ('kernel', 'memcpy', 'memset')
), per_api AS (
    SELECT api, count(*) AS gpu_events, sum(dur_ns) AS gpu_ns,
           quantile_cont(queue_ns, 0.5) AS q50, quantile_cont(queue_ns, 0.99) AS q99,
           max(queue_ns) AS qmax, count(*) FILTER (WHERE clamped) AS nclamped
    FROM g GROUP BY api
), calls AS (
    SELECT name AS api, count(*) AS calls, sum(dur_ns) AS api_ns FROM rt GROUP BY name
), rows_ AS (
    SELECT 0 AS o, c.api, c.calls, c.api_ns, p.gpu_events, p.gpu_ns, p.q50, p.q99, p.qmax,
           p.nclamped
    FROM calls c JOIN per_api p USING (api)
    UNION ALL
    SELECT 1, '(all runtime)', (SELECT count(*) FROM rt), (SELECT sum(dur_ns) FROM rt),
           count(*), sum(dur_ns), quantile_cont(queue_ns, 0.5), quantile_cont(queue_ns, 0.99),
           max(queue_ns), count(*) FILTER (WHERE clamped)
    FROM g HAVING (SELECT count(*) FROM rt) > 0
)
SELECT $trace_id::INTEGER AS trace_id, api, calls, api_ns / 1e6 AS api_ms,
       api_ns / 1e3 / nullif(calls, 0) AS mean_api_us, gpu_events, gpu_ns / 1e6 AS gpu_ms,
       q50 / 1e3 AS queue_p50_us, q99 / 1e3 AS queue_p99_us, qmax / 1e3 AS queue_max_us,
       nclamped AS queue_clamped
FROM rows_
ORDER BY o, api_ns DESC, api;
