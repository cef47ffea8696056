-- name: serving_waterfall
-- returns: one row per part of a served request's time, in waterfall order (queue, the batches' stages in pipeline order, batch time outside stages, between batches, hand-back), then 'end_to_end': trace_id, part, position, requests, mean_ms, p50_ms, p90_ms, p99_ms, max_ms, share (of the summed end-to-end time)
-- param: $trace_id INTEGER trace to summarize
-- param: $warmup INTEGER served requests left out as warm-up: the first N by arrival, and with them every batch that served only them
-- default: $trace_id 1
-- default: $warmup 0
-- The parts of queries/serving_requests.sql (the same definitions, repeated here: queries are
-- single files) across served requests: every request has every part (0 when it had none),
-- so the shares add up to 1. Percentiles are quantile_cont (linear interpolation) of the
-- per-request values.
WITH warm AS (  -- the first $warmup served requests by arrival (warm-up: left out)
    SELECT request_id FROM (
        SELECT r.request_id, row_number() OVER (ORDER BY r.start_ns, r.request_id) AS k
        FROM requests r
        WHERE r.trace_id = $trace_id
          AND r.request_id IN (SELECT request_id FROM request_batches WHERE trace_id = $trace_id)
    ) WHERE k <= $warmup
), served AS (
    SELECT DISTINCT rb.request_id, rb.request_key, b.batch_id, b.size, b.start_ns, b.end_ns,
           coalesce(b.pid, -1) AS pid, b.tid
    FROM request_batches rb JOIN batches b USING (trace_id, batch_id)
    WHERE rb.trace_id = $trace_id AND rb.request_id IS NOT NULL
      AND rb.request_id NOT IN (SELECT request_id FROM warm)
), in_batch AS (  -- each batch's stages (a batch once, not once per member)
    SELECT b.batch_id, b.start_ns AS b0, b.end_ns AS b1, s.event_id, s.stage, s.parent_stage,
           s.start_ns, least(s.end_ns, b.end_ns) - s.start_ns AS ns
    FROM batches b
    JOIN stages s
      ON s.tid = b.tid AND coalesce(s.pid, -1) = coalesce(b.pid, -1)
     AND s.start_ns >= b.start_ns AND s.start_ns < b.end_ns
    WHERE b.trace_id = $trace_id AND s.trace_id = $trace_id
), top_stages AS (  -- those not nested in another stage of the same batch
    SELECT i.* FROM in_batch i
    WHERE i.parent_stage IS NULL
       OR NOT EXISTS (SELECT 1 FROM in_batch p
                      WHERE p.batch_id = i.batch_id AND p.stage = i.parent_stage
                        AND p.start_ns <= i.start_ns AND p.event_id <> i.event_id)
), batch_stage AS (
    SELECT batch_id, stage, sum(ns) AS ns, min(start_ns) AS first_ns
    FROM top_stages GROUP BY ALL
), per_req_stage AS (
    SELECT v.request_id, bs.stage, sum(bs.ns) AS ns, min(bs.first_ns) AS first_ns
    FROM served v JOIN batch_stage bs USING (batch_id)
    GROUP BY ALL
), stage_obj AS (
    SELECT request_id, sum(ns) AS staged_ns,
           '{' || string_agg(to_json(stage)::VARCHAR || ':' || to_json(ns / 1e6)::VARCHAR, ','
                             ORDER BY first_ns, stage) || '}' AS stages_json
    FROM per_req_stage GROUP BY request_id
), per_req AS (
    SELECT request_id, any_value(request_key) AS request_key, count(*) AS batches,
           arg_min(batch_id, (start_ns, batch_id)) AS batch_id,
           arg_min(size, (start_ns, batch_id)) AS batch_size,
           min(start_ns) AS b0, max(end_ns) AS b1, sum(end_ns - start_ns) AS in_batch_ns
    FROM served GROUP BY request_id
), t0 AS (
    SELECT start_ns FROM traces WHERE trace_id = $trace_id
), per_req_full AS (
    SELECT r.request_id, r.dur_ns AS e2e_ns,
           greatest(p.b0 - r.start_ns, 0) AS queue_ns,
           greatest(p.b1 - p.b0 - p.in_batch_ns, 0) AS between_ns,
           greatest(r.end_ns - p.b1, 0) AS hand_back_ns,
           greatest(p.in_batch_ns - coalesce(o.staged_ns, 0), 0) AS other_ns
    FROM per_req p
    JOIN requests r ON r.trace_id = $trace_id AND r.request_id = p.request_id
    LEFT JOIN stage_obj o ON o.request_id = p.request_id
), stage_order AS (
    SELECT stage, row_number() OVER (ORDER BY min(first_ns), stage) AS k
    FROM per_req_stage GROUP BY stage
), parts AS (
    SELECT request_id, 'queue' AS part, 0 AS position, queue_ns AS ns FROM per_req_full
    UNION ALL
    SELECT f.request_id, so.stage, so.k, coalesce(ps.ns, 0)
    FROM per_req_full f CROSS JOIN stage_order so
    LEFT JOIN per_req_stage ps ON ps.request_id = f.request_id AND ps.stage = so.stage
    UNION ALL
    SELECT request_id, 'batch (no stage)', 1000, other_ns FROM per_req_full
    UNION ALL
    SELECT request_id, 'between batches', 1001, between_ns FROM per_req_full
    UNION ALL
    SELECT request_id, 'hand-back', 1002, hand_back_ns FROM per_req_full
    UNION ALL
    SELECT request_id, 'end_to_end', 1003, e2e_ns FROM per_req_full
)
SELECT $trace_id AS trace_id, part, position, count(*) AS requests,
       avg(ns) / 1e6 AS mean_ms,
       quantile_cont(ns, 0.5) / 1e6 AS p50_ms,
       quantile_cont(ns, 0.9) / 1e6 AS p90_ms,
       quantile_cont(ns, 0.99) / 1e6 AS p99_ms,
       max(ns) / 1e6 AS max_ms,
       sum(ns) / nullif((SELECT sum(e2e_ns) FROM per_req_full), 0) AS share
FROM parts
GROUP BY part, position
ORDER BY position, part;
