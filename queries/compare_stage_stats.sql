-- name: compare_stage_stats
-- returns: one row per stage: stage, count, p50_ms, p90_ms, p99_ms, mean_ms, max_ms, total_ms, share
-- Latency per stage across requests, over every trace in the store, for tracekit diff/check.
-- Percentiles interpolate linearly (quantile_cont). `end_to_end` is the request duration,
-- `unattributed` the part of a request no stage covers; share = stage total / end_to_end
-- total. The samples are those of compare_stage_samples (one per request and stage).
WITH samples AS (
    WITH st AS (
        SELECT s.trace_id, s.request_id, s.stage, s.dur_ns,
               greatest(s.start_ns, r.start_ns) AS a, least(s.end_ns, r.end_ns) AS b
        FROM stages s JOIN requests r USING (trace_id, request_id)
    ), iv AS (
        SELECT {'trace_id': trace_id, 'request_id': request_id} AS key, a AS start_ns,
               b AS end_ns
        FROM st
    ), covered AS (  -- union length of each request's stages (tk_union_ns)
        SELECT key.trace_id AS trace_id, key.request_id AS request_id, union_ns AS covered_ns
        FROM tk_union_ns('iv')
    )
    SELECT trace_id, request_id, stage, sum(dur_ns)::BIGINT AS dur_ns
    FROM st GROUP BY trace_id, request_id, stage
    UNION ALL
    SELECT trace_id, request_id, 'end_to_end', dur_ns FROM requests
    UNION ALL
    SELECT r.trace_id, r.request_id, 'unattributed', r.dur_ns - coalesce(c.covered_ns, 0)
    FROM requests r LEFT JOIN covered c USING (trace_id, request_id)
)
SELECT stage,
       count(*) AS count,
       quantile_cont(dur_ns, 0.50) / 1e6 AS p50_ms,
       quantile_cont(dur_ns, 0.90) / 1e6 AS p90_ms,
       quantile_cont(dur_ns, 0.99) / 1e6 AS p99_ms,
       avg(dur_ns) / 1e6 AS mean_ms,
       max(dur_ns) / 1e6 AS max_ms,
       sum(dur_ns) / 1e6 AS total_ms,
       sum(dur_ns) / nullif((SELECT sum(dur_ns) FROM requests), 0) AS share
FROM samples
GROUP BY stage
ORDER BY CASE stage WHEN 'end_to_end' THEN 0 WHEN 'unattributed' THEN 2 ELSE 1 END, stage;
