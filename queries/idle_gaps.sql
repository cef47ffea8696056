-- name: idle_gaps
-- returns: the $limit longest GPU idle gaps of each kind, longest first: trace_id, rank, kind ('between' | 'lead-in' | 'tail'), request_id, gap_start_ms (from trace start), gap_ms, before (GPU event ending the busy period), after (GPU event starting the next), stage (stage of the host thread when the gap starts), host_op, host_kind, host_depth, host_overlap_ms
-- param: $trace_id INTEGER trace to search
-- param: $limit INTEGER gaps to return of each kind
-- default: $trace_id 1
-- default: $limit 10
-- Three kinds of gap in the GPU's busy islands (every device and stream together: each
-- device's gpu_islands, merged); a zero-length activity is not busy and splits no gap.
-- 'between': from the end of one busy period to the start of the next, first GPU activity to
-- last. 'lead-in': inside a request (requests: ProfilerStep#N, tracekit:request, ...) with GPU
-- activity, from its start to the first GPU activity in it; 'tail': from the last GPU
-- activity in it to its end (request_id names the request; a lead-in or tail may be part of
-- a 'between' gap that spans two requests). What the host was doing: of the host events
-- overlapping the gap, the deepest among those covering at least half as much of it as the
-- one covering the most (the data loader's call, the copy, `.to()`); request ranges (their
-- defining events, ProfilerStep#N), tracekit:* ranges and marks aside, since they say only
-- where the gap is (an inferred stage's event, such as the data loader's, stays).
WITH isl AS (
    FROM gpu_islands WHERE trace_id = $trace_id
), gpu AS (
    SELECT start_ns, end_ns,
           max(end_ns) OVER (ORDER BY start_ns  -- (a tie's order changes no gap: tk_islands)
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM isl
), between_gaps AS (  -- the $limit longest (a row number over every gap sorted them all)
    FROM gpu WHERE prev_end IS NOT NULL AND start_ns > prev_end
    ORDER BY start_ns - prev_end DESC, start_ns LIMIT greatest($limit, 0)
), req_gpu AS (  -- per request with GPU activity: its first and last busy instant inside it
    SELECT r.request_id, r.start_ns AS r0, r.end_ns AS r1,
           min(greatest(i.start_ns, r.start_ns)) AS first_busy,
           max(least(i.end_ns, r.end_ns)) AS last_busy
    FROM requests r JOIN isl i
      ON i.start_ns < r.end_ns AND i.end_ns > r.start_ns
    WHERE r.trace_id = $trace_id
    GROUP BY ALL
), lead_in AS (
    FROM req_gpu WHERE first_busy > r0
    ORDER BY first_busy - r0 DESC, r0 LIMIT greatest($limit, 0)
), tail AS (
    FROM req_gpu WHERE r1 > last_busy
    ORDER BY r1 - last_busy DESC, r1 LIMIT greatest($limit, 0)
), gaps AS (
    SELECT *, row_number() OVER (ORDER BY g1 - g0 DESC, g0, kind) AS gap_no
    FROM (
        SELECT 'between' AS kind, NULL::BIGINT AS request_id, prev_end AS g0, start_ns AS g1
        FROM between_gaps
        UNION ALL
        SELECT 'lead-in', request_id, r0, first_busy FROM lead_in
        UNION ALL
        SELECT 'tail', request_id, last_busy, r1 FROM tail
    )
), after_ev AS (  -- the GPU event that opens the next busy period (first by end, then id)
    SELECT t.gap_no, arg_min(a.name, (a.end_ns, a.event_id)) AS after
    FROM gaps t JOIN events a
      ON a.trace_id = $trace_id AND a.kind IN ('kernel', 'memcpy', 'memset')
     AND a.start_ns = t.g1 AND a.end_ns > a.start_ns
    WHERE t.kind <> 'tail'
    GROUP BY t.gap_no
), before_ev AS (  -- the GPU event whose end closes the busy period (first by id on a tie)
    SELECT t.gap_no, arg_min(e.name, e.event_id) AS before
    FROM gaps t JOIN events e
      ON e.trace_id = $trace_id AND e.kind IN ('kernel', 'memcpy', 'memset') AND e.end_ns = t.g0
     AND e.end_ns > e.start_ns
    WHERE t.kind <> 'lead-in'
    GROUP BY t.gap_no
), host_hits AS (  -- (not the requests' own ranges: they only say where the gap is)
    SELECT t.gap_no, e.name, e.kind, e.depth, e.start_ns,
           least(e.end_ns, t.g1) - greatest(e.start_ns, t.g0) AS overlap
    FROM gaps t JOIN events e  -- start < g1 and end > g0 as one condition: a loop over the few
      -- gaps, where the two comparisons made a merge join that sorted every host event
      ON e.trace_id = $trace_id AND e.tid IS NOT NULL
     AND greatest(e.start_ns - t.g1, t.g0 - e.end_ns) < 0
    WHERE e.kind NOT IN ('mark') AND NOT (e.kind = 'range' AND e.name LIKE 'tracekit:%')
      AND e.name NOT LIKE 'ProfilerStep#%'
      AND NOT EXISTS (FROM requests m WHERE m.trace_id = e.trace_id AND m.event_id = e.event_id)
), best AS (  -- the deepest of the events covering at least half the most any one covers
    SELECT gap_no, name AS host_op, kind AS host_kind, depth AS host_depth, overlap
    FROM (SELECT *, max(overlap) OVER (PARTITION BY gap_no) AS most FROM host_hits)
    WHERE overlap * 2 >= most
    QUALIFY row_number() OVER (PARTITION BY gap_no
                               ORDER BY depth DESC, overlap DESC, start_ns, name) = 1
), stage_at AS (
    SELECT t.gap_no, arg_max(s.stage, s.start_ns) AS stage
    FROM gaps t JOIN stages s  -- (one condition, as above)
      ON s.trace_id = $trace_id AND t.g0 BETWEEN s.start_ns AND s.end_ns - 1
    GROUP BY t.gap_no
)
SELECT $trace_id::INTEGER AS trace_id, t.gap_no AS rank, t.kind, t.request_id,
       (t.g0 - tr.start_ns) / 1e6 AS gap_start_ms, (t.g1 - t.g0) / 1e6 AS gap_ms,
       b.before, a.after, s.stage, h.host_op, h.host_kind, h.host_depth,
       h.overlap / 1e6 AS host_overlap_ms
FROM gaps t
JOIN traces tr ON tr.trace_id = $trace_id
LEFT JOIN after_ev a USING (gap_no)
LEFT JOIN before_ev b USING (gap_no)
LEFT JOIN best h USING (gap_no)
LEFT JOIN stage_at s USING (gap_no)
ORDER BY t.gap_no;
