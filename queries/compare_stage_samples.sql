-- name: compare_stage_samples
-- returns: one row per (trace_id, request_id, stage): trace_id, request_id, stage, dur_ns
-- The per-request samples behind compare_stage_stats (tracekit diff bootstraps over them).
-- A stage's time in a request is the sum of its ranges' durations there; `end_to_end` is the
-- request's duration; `unattributed` is the request minus the union of its stage ranges
-- (clipped to the request). Stages outside every request are left out.
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
ORDER BY trace_id, request_id, stage;
