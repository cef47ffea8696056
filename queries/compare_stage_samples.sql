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
), ordered AS (
    SELECT trace_id, request_id, a, b,
           max(b) OVER (PARTITION BY trace_id, request_id ORDER BY a, b
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM st WHERE b > a
), islands AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR a > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY trace_id, request_id ORDER BY a, b
                        ROWS UNBOUNDED PRECEDING) AS grp
    FROM ordered
), covered AS (
    SELECT trace_id, request_id, sum(e - s)::BIGINT AS covered_ns
    FROM (SELECT trace_id, request_id, grp, min(a) AS s, max(b) AS e
          FROM islands GROUP BY trace_id, request_id, grp)
    GROUP BY trace_id, request_id
)
SELECT trace_id, request_id, stage, sum(dur_ns)::BIGINT AS dur_ns
FROM st GROUP BY trace_id, request_id, stage
UNION ALL
SELECT trace_id, request_id, 'end_to_end', dur_ns FROM requests
UNION ALL
SELECT r.trace_id, r.request_id, 'unattributed', r.dur_ns - coalesce(c.covered_ns, 0)
FROM requests r LEFT JOIN covered c USING (trace_id, request_id)
ORDER BY trace_id, request_id, stage;
