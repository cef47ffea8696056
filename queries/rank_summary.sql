-- name: rank_summary
-- returns: one row per trace and stage: trace_id, rank, path, requests, stage, stage_count, p50_ms, p99_ms, gpu_kernel_ms, gpu_skew_pct, p50_skew_pct
-- param: $min_requests INTEGER traces with fewer requests than this are left out (0 keeps all)
-- default: $min_requests 0
-- Multi-rank view (one trace per rank, e.g. `tracekit sql ranks/ ...`): per trace its rank
-- (traces.rank from Kineto distributedInfo, NULL when unknown), request count, each stage's
-- p50/p99 duration across its ranges, the total GPU kernel time (a plain sum over kernels),
-- and the skew against the median rank: gpu_skew_pct = 100 * (gpu_kernel_ms / median over
-- traces - 1), p50_skew_pct the same for the stage's p50 against that stage's median p50.
-- A straggler rank shows as a large positive skew. Stage is '(none)' for a trace without stages.
WITH req AS (
    SELECT trace_id, count(*) AS requests FROM requests GROUP BY trace_id
), gpu AS (
    SELECT trace_id, sum(dur_ns) AS kernel_ns FROM events WHERE kind = 'kernel' GROUP BY trace_id
), st AS (
    SELECT trace_id, stage, count(*) AS stage_count,
           quantile_cont(dur_ns, 0.5) / 1e6 AS p50_ms,
           quantile_cont(dur_ns, 0.99) / 1e6 AS p99_ms
    FROM stages GROUP BY trace_id, stage
), per_trace AS (
    SELECT t.trace_id, t.rank, t.path, coalesce(r.requests, 0) AS requests,
           coalesce(g.kernel_ns, 0) / 1e6 AS gpu_kernel_ms
    FROM traces t LEFT JOIN req r USING (trace_id) LEFT JOIN gpu g USING (trace_id)
    WHERE coalesce(r.requests, 0) >= $min_requests
), med AS (
    SELECT median(gpu_kernel_ms) AS gpu_med FROM per_trace
), stage_med AS (
    SELECT stage, median(p50_ms) AS p50_med
    FROM st WHERE trace_id IN (SELECT trace_id FROM per_trace) GROUP BY stage
)
SELECT p.trace_id, p.rank, p.path, p.requests,
       coalesce(s.stage, '(none)') AS stage,
       coalesce(s.stage_count, 0) AS stage_count,
       s.p50_ms, s.p99_ms,
       p.gpu_kernel_ms,
       CASE WHEN m.gpu_med > 0 THEN 100.0 * (p.gpu_kernel_ms / m.gpu_med - 1) END AS gpu_skew_pct,
       CASE WHEN sm.p50_med > 0 THEN 100.0 * (s.p50_ms / sm.p50_med - 1) END AS p50_skew_pct
FROM per_trace p
CROSS JOIN med m
LEFT JOIN st s USING (trace_id)
LEFT JOIN stage_med sm ON sm.stage = s.stage
ORDER BY p.rank NULLS LAST, p.trace_id, stage;
