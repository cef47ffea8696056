-- name: request_breakdown
-- returns: one row per request: trace_id, request_id, start_ms (from trace start), e2e_ms, latency_ms, gpu_tail_ms, gpu_idle_before_ms, preprocess_ms, inference_ms, postprocess_ms, other_stages_ms, unattributed_ms, gpu_busy_ms, gpu_events, stages_json (JSON object stage -> ms, every stage)
-- param: $trace_id INTEGER trace to break down
-- default: $trace_id 1
-- Each request's host time split by stage (stage totals per request), with 'unattributed' =
-- request duration minus the union of its stages' intervals clipped to the request. gpu_busy_ms
-- = per device the length of the union of GPU intervals (kernel/memcpy/memset) attributed to
-- the request (launched from inside it), summed over devices; never a plain sum. e2e_ms is
-- the host range; latency_ms ends at the later of its host end and the end of the last GPU
-- work it launched (the latency that includes the GPU), and gpu_tail_ms = how much later than
-- the host end that GPU work finishes (0 when it finishes inside the range).
-- gpu_idle_before_ms = from the request's start to the first GPU activity on any device inside
-- it (its whole host time when it has none): the GPU idle before the first kernel.
WITH rq AS (
    SELECT * FROM requests WHERE trace_id = $trace_id
), st AS (
    SELECT s.request_id, s.stage, s.dur_ns,
           greatest(s.start_ns, r.start_ns) AS s0, least(s.end_ns, r.end_ns) AS s1
    FROM stages s JOIN rq r USING (request_id)
    WHERE s.trace_id = $trace_id
), per_stage AS (
    SELECT request_id, stage, sum(dur_ns) AS ns, min(s0) AS first_ns FROM st GROUP BY ALL
), stage_cols AS (
    SELECT request_id,
           sum(ns) FILTER (WHERE stage = 'preprocess') AS pre_ns,
           sum(ns) FILTER (WHERE stage = 'inference') AS inf_ns,
           sum(ns) FILTER (WHERE stage = 'postprocess') AS post_ns,
           sum(ns) FILTER (WHERE stage NOT IN ('preprocess', 'inference', 'postprocess'))
               AS other_ns,
           '{' || string_agg(to_json(stage)::VARCHAR || ':' || to_json(ns / 1e6)::VARCHAR, ','
                             ORDER BY first_ns, stage) || '}' AS stages_json
    FROM per_stage GROUP BY request_id
), stage_iv AS (
    SELECT request_id AS key, s0 AS start_ns, s1 AS end_ns FROM st
), covered AS (  -- union length of the request's stages (tk_union_ns)
    SELECT key AS request_id, union_ns AS ns FROM tk_union_ns('stage_iv')
), gpu AS (
    SELECT {'request_id': request_id, 'device': coalesce(device, -1)} AS key, start_ns, end_ns
    FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
      AND request_id IS NOT NULL
), first_gpu AS (  -- the first GPU activity inside each request's host range, any device
    SELECT r.request_id, min(i.start_ns) AS first_ns
    FROM rq r JOIN gpu_islands i
      ON i.trace_id = $trace_id AND i.end_ns > r.start_ns AND i.start_ns < r.end_ns
    GROUP BY r.request_id
), ends AS (  -- where each request's latency ends (tk_gpu_ends: the one definition)
    SELECT request_id, gpu_end_ns FROM tk_gpu_ends()
    WHERE trace_id = $trace_id AND stage IS NULL
), gpu_n AS (
    SELECT request_id, count(*) AS n FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
      AND request_id IS NOT NULL
    GROUP BY request_id
), gpu_req AS (  -- per device the union length (tk_union_ns), summed over devices
    SELECT n.request_id, coalesce(sum(u.union_ns), 0) AS busy_ns, any_value(n.n) AS n
    FROM gpu_n n LEFT JOIN tk_union_ns('gpu') u ON u.key.request_id = n.request_id
    GROUP BY n.request_id
)
SELECT $trace_id::INTEGER AS trace_id, r.request_id,
       (r.start_ns - t.start_ns) / 1e6 AS start_ms,
       r.dur_ns / 1e6 AS e2e_ms,
       (greatest(r.end_ns, coalesce(en.gpu_end_ns, r.end_ns)) - r.start_ns) / 1e6 AS latency_ms,
       greatest(coalesce(en.gpu_end_ns, r.end_ns) - r.end_ns, 0) / 1e6 AS gpu_tail_ms,
       greatest(coalesce(fg.first_ns, r.end_ns) - r.start_ns, 0) / 1e6 AS gpu_idle_before_ms,
       coalesce(c.pre_ns, 0) / 1e6 AS preprocess_ms,
       coalesce(c.inf_ns, 0) / 1e6 AS inference_ms,
       coalesce(c.post_ns, 0) / 1e6 AS postprocess_ms,
       coalesce(c.other_ns, 0) / 1e6 AS other_stages_ms,
       (r.dur_ns - coalesce(cv.ns, 0)) / 1e6 AS unattributed_ms,
       coalesce(g.busy_ns, 0) / 1e6 AS gpu_busy_ms,
       coalesce(g.n, 0)::BIGINT AS gpu_events,
       coalesce(c.stages_json, '{}') AS stages_json
FROM rq r
JOIN traces t ON t.trace_id = $trace_id
LEFT JOIN stage_cols c USING (request_id)
LEFT JOIN covered cv USING (request_id)
LEFT JOIN gpu_req g USING (request_id)
LEFT JOIN first_gpu fg USING (request_id)
LEFT JOIN ends en USING (request_id)
ORDER BY r.request_id;
