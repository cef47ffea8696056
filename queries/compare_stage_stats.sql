-- name: compare_stage_stats
-- returns: one row per stage: stage, count, p50_ms, p90_ms, p99_ms, mean_ms, max_ms, total_ms, share
-- Latency per stage across requests, over every trace in the store, for tracekit diff/check.
-- Percentiles interpolate linearly (quantile_cont). `end_to_end` is the request duration,
-- `unattributed` the part of a request no stage covers; share = stage total / end_to_end
-- total. The samples are those of compare_stage_samples (one per request and stage; 'window'
-- requests are left out).
WITH samples AS (
    FROM tk_stage_samples()
)
SELECT stage,
       count(*) AS count,
       quantile_cont(dur_ns, 0.50) / 1e6 AS p50_ms,
       quantile_cont(dur_ns, 0.90) / 1e6 AS p90_ms,
       quantile_cont(dur_ns, 0.99) / 1e6 AS p99_ms,
       avg(dur_ns) / 1e6 AS mean_ms,
       max(dur_ns) / 1e6 AS max_ms,
       sum(dur_ns) / 1e6 AS total_ms,
       sum(dur_ns) / nullif((SELECT sum(dur_ns) FROM samples WHERE stage = 'end_to_end'), 0) AS share
FROM samples
GROUP BY stage
ORDER BY CASE stage WHEN 'end_to_end' THEN 0 WHEN 'unattributed' THEN 2 ELSE 1 END, stage;
