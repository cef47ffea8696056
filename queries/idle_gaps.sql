-- name: idle_gaps
-- returns: the $limit longest gaps between GPU activity: trace_id, rank, gap_start_ms (from trace start), gap_ms, before (GPU event ending the busy period), after (GPU event starting the next), stage (stage of the host thread when the gap starts), host_op, host_kind, host_depth, host_overlap_ms
-- param: $trace_id INTEGER trace to search
-- param: $limit INTEGER gaps to return
-- default: $trace_id 1
-- default: $limit 10
-- Gaps between the GPU's busy islands (every device and stream together: each device's
-- gpu_islands, merged) from the first GPU activity to the last; a zero-length activity is
-- not busy and splits no gap. What the host was doing: of the host events overlapping the gap
-- (tracekit stage/request ranges aside), the one covering the most of it, the deepest on a tie.
WITH gpu AS (
    SELECT start_ns, end_ns,
           max(end_ns) OVER (ORDER BY start_ns  -- (a tie's order changes no gap: tk_islands)
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM gpu_islands WHERE trace_id = $trace_id
), gaps AS (  -- the $limit longest (a row number over every gap sorted them all)
    SELECT prev_end AS g0, start_ns AS g1,
           row_number() OVER (ORDER BY start_ns - prev_end DESC, start_ns) AS gap_no
    FROM (FROM gpu WHERE prev_end IS NOT NULL AND start_ns > prev_end
          ORDER BY start_ns - prev_end DESC, start_ns LIMIT greatest($limit, 0))
), opening AS (  -- the GPU event that opens the next busy period (first by end, then id)
    SELECT t.g0, t.g1, t.gap_no, a.name AS after,
           row_number() OVER (PARTITION BY t.gap_no ORDER BY a.end_ns, a.event_id) AS r
    FROM gaps t JOIN events a
      ON a.trace_id = $trace_id AND a.kind IN ('kernel', 'memcpy', 'memset')
     AND a.start_ns = t.g1 AND a.end_ns > a.start_ns
), top AS (
    SELECT g0, g1, gap_no, after FROM opening WHERE r = 1
), before_ev AS (  -- the GPU event whose end closes the busy period (first by id on a tie)
    SELECT t.gap_no, arg_min(e.name, e.event_id) AS before
    FROM top t JOIN events e
      ON e.trace_id = $trace_id AND e.kind IN ('kernel', 'memcpy', 'memset') AND e.end_ns = t.g0
     AND e.end_ns > e.start_ns
    GROUP BY t.gap_no
), host_hits AS (
    SELECT t.gap_no, e.name, e.kind, e.depth,
           least(e.end_ns, t.g1) - greatest(e.start_ns, t.g0) AS overlap
    FROM top t JOIN events e  -- start < g1 and end > g0 as one condition: a loop over the few
      -- gaps, where the two comparisons made a merge join that sorted every host event
      ON e.trace_id = $trace_id AND e.tid IS NOT NULL
     AND greatest(e.start_ns - t.g1, t.g0 - e.end_ns) < 0
    WHERE e.kind NOT IN ('mark') AND NOT (e.kind = 'range' AND e.name LIKE 'tracekit:%')
), best AS (
    SELECT gap_no, arg_max(name, overlap * 1000 + depth) AS host_op,
           arg_max(kind, overlap * 1000 + depth) AS host_kind,
           arg_max(depth, overlap * 1000 + depth) AS host_depth, max(overlap) AS overlap
    FROM host_hits GROUP BY gap_no
), stage_at AS (
    SELECT t.gap_no, arg_max(s.stage, s.start_ns) AS stage
    FROM top t JOIN stages s  -- (one condition, as above)
      ON s.trace_id = $trace_id AND t.g0 BETWEEN s.start_ns AND s.end_ns - 1
    GROUP BY t.gap_no
)
SELECT $trace_id::INTEGER AS trace_id, t.gap_no AS rank, (t.g0 - tr.start_ns) / 1e6 AS gap_start_ms,
       (t.g1 - t.g0) / 1e6 AS gap_ms, b.before, t.after, s.stage, h.host_op, h.host_kind,
       h.host_depth, h.overlap / 1e6 AS host_overlap_ms
FROM top t
JOIN traces tr ON tr.trace_id = $trace_id
LEFT JOIN before_ev b USING (gap_no)
LEFT JOIN best h USING (gap_no)
LEFT JOIN stage_at s USING (gap_no)
ORDER BY t.gap_no;
