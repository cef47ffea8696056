-- name: timeline_lanes
-- returns: the report's timeline, one row per drawn interval: trace_id, lane_kind ('requests' | 'stages' | 'blocking' | 'gpu' | 'stream' | 'zoom_gpu'), lane_key (the lane's order key), pid, tid, depth, device, stream, request_id (the request of a one-request interval; for zoom_gpu the request zoomed into), name (stage, 'request N', call or dominant GPU category), start_ms, end_ms (from origin_ns), merged (source intervals in it), busy_ms (GPU: union of its activity; host: summed durations), origin_ns (the trace's start), window_start_ms, window_end_ms (the drawn window: first to last interval of any lane), merge_ms (the lane's merge tolerance)
-- param: $trace_id INTEGER trace to draw
-- param: $px INTEGER pixels across the window: the merge tolerance is window / $px
-- param: $zoom INTEGER slowest requests also drawn at their own tolerance (request / $px)
-- default: $trace_id 1
-- default: $px 608
-- default: $zoom 3
-- One time axis in ms from the trace's start, drawn over the window from the first to the
-- last interval of any lane (start-up and teardown outside it). Lanes: requests/steps (or windows); the stages of each
-- host thread, one lane per nesting depth; the host's blocking calls (synchronize, memcpy);
-- GPU busy per device and per stream, each interval named by the category with the most time
-- in it. Bounded: on a GPU lane, busy islands closer than the tolerance merge (every gap left
-- is at least window / $px, so at most $px + 1 intervals); on a host lane, a range at least the
-- tolerance long stays alone and runs of shorter ones closer than it merge (at most about
-- 2 x $px + 1 per lane and depth). zoom_gpu: the GPU lanes again inside each of the $zoom
-- slowest requests at that request's own tolerance, for the report's zoomed view.
WITH blocking AS (
    SELECT pid, tid, request_id, name, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND kind = 'runtime'
      AND (name ILIKE '%synchronize%' OR name ILIKE '%memcpy%')
), hull AS (  -- the window: first to last of what the lanes draw (start-up and teardown out)
    SELECT min(start_ns) AS w0, max(end_ns) AS w1 FROM (
        SELECT start_ns, end_ns FROM requests WHERE trace_id = $trace_id
        UNION ALL SELECT start_ns, end_ns FROM stages WHERE trace_id = $trace_id
        UNION ALL SELECT start_ns, end_ns FROM gpu_islands WHERE trace_id = $trace_id
        UNION ALL SELECT start_ns, end_ns FROM blocking)
), span AS (
    SELECT t.start_ns AS t0, coalesce(h.w0, t.start_ns) AS w0,
           coalesce(h.w1, t.start_ns + t.duration_ns) AS w1,
           greatest((coalesce(h.w1, t.start_ns + t.duration_ns) - coalesce(h.w0, t.start_ns))
                    // $px, 1) AS tol
    FROM traces t CROSS JOIN hull h WHERE t.trace_id = $trace_id
), depths AS (  -- a stage range's depth on its thread: ranges open at its start (running sum)
    SELECT event_id, d FROM (
        SELECT event_id, is_start,
               sum(CASE WHEN is_start THEN 1 ELSE -1 END) OVER (
                   PARTITION BY pid, tid ORDER BY t, is_start, end_t DESC, event_id
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS d
        FROM (SELECT event_id, pid, tid, start_ns AS t, true AS is_start, end_ns AS end_t
              FROM stages WHERE trace_id = $trace_id
              UNION ALL
              SELECT event_id, pid, tid, end_ns, false, end_ns
              FROM stages WHERE trace_id = $trace_id))
    WHERE is_start
), host AS (  -- host intervals: (lane, name, start, end)
    SELECT 'requests' AS lane_kind, CAST(NULL AS BIGINT) AS pid, CAST(NULL AS BIGINT) AS tid,
           0 AS depth, request_id, 'request ' || request_id AS name, start_ns, end_ns
    FROM requests WHERE trace_id = $trace_id
    UNION ALL
    SELECT 'stages', s.pid, s.tid, coalesce(d.d, 0), s.request_id, s.stage, s.start_ns, s.end_ns
    FROM stages s LEFT JOIN depths d USING (event_id) WHERE s.trace_id = $trace_id
    UNION ALL
    SELECT 'blocking', pid, tid, 0, request_id, name, start_ns, end_ns FROM blocking
), host_o AS (
    SELECT h.*, s.tol, h.end_ns - h.start_ns >= s.tol AS long,
           lag(h.end_ns - h.start_ns >= s.tol) OVER (
               PARTITION BY h.lane_kind, h.pid, h.tid, h.depth ORDER BY h.start_ns, h.end_ns
           ) AS prev_long,
           max(h.end_ns) OVER (  -- written out: Spark SQL cannot add a frame to a named window
               PARTITION BY h.lane_kind, h.pid, h.tid, h.depth ORDER BY h.start_ns, h.end_ns
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM host h CROSS JOIN span s
), host_g AS (  -- a new group: a long range, one after a long range, or one a tolerance away
    SELECT *, sum(CASE WHEN prev_end IS NULL OR long OR prev_long
                            OR start_ns - prev_end >= tol THEN 1 ELSE 0 END) OVER (
                  PARTITION BY lane_kind, pid, tid, depth ORDER BY start_ns, end_ns
                  ROWS UNBOUNDED PRECEDING) AS grp
    FROM host_o
), host_lanes AS (
    SELECT lane_kind, pid, tid, depth, CAST(NULL AS INTEGER) AS device,
           CAST(NULL AS BIGINT) AS stream,
           CASE WHEN count(*) = 1 THEN min(request_id) END AS request_id,
           CASE WHEN count(*) = 1 THEN min(name)
                ELSE arg_max(name, end_ns - start_ns) END AS name,
           min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS merged,
           sum(end_ns - start_ns) AS busy_ns, min(tol) AS tol
    FROM host_g GROUP BY lane_kind, pid, tid, depth, grp
), ga AS (  -- (once: its category rules are the costly part)
    SELECT device, stream, category, start_ns, end_ns FROM tk_gpu_activity($trace_id)
), act AS (  -- GPU activity keyed by device (stream NULL) and by (device, stream)
    SELECT 'gpu' AS lane_kind, device, CAST(NULL AS BIGINT) AS stream, category,
           start_ns, end_ns
    FROM ga
    UNION ALL
    SELECT 'stream', device, stream, category, start_ns, end_ns FROM ga
), windows AS (  -- the whole trace, and the $zoom slowest requests at their own tolerance
    SELECT CAST(NULL AS BIGINT) AS request_id, t0 AS w0, CAST(NULL AS BIGINT) AS w1, tol
    FROM span
    UNION ALL
    SELECT request_id, start_ns, end_ns, greatest((end_ns - start_ns) // $px, 1)
    FROM (SELECT * FROM requests WHERE trace_id = $trace_id
          ORDER BY dur_ns DESC, request_id LIMIT greatest($zoom, 0))
), act_w AS (  -- each window's activity, clipped to it
    SELECT CASE WHEN w.request_id IS NULL THEN a.lane_kind ELSE 'zoom_gpu' END AS lane_kind,
           w.request_id, w.tol, a.device,
           CASE WHEN w.request_id IS NULL THEN a.stream END AS stream, a.category,
           CASE WHEN w.request_id IS NULL THEN a.start_ns ELSE greatest(a.start_ns, w.w0) END
               AS start_ns,
           CASE WHEN w.request_id IS NULL THEN a.end_ns ELSE least(a.end_ns, w.w1) END AS end_ns
    FROM act a JOIN windows w
      ON (w.request_id IS NULL OR (a.lane_kind = 'gpu' AND a.end_ns > w.w0 AND a.start_ns < w.w1))
    WHERE a.end_ns > a.start_ns
), act_o AS (
    SELECT *, max(end_ns) OVER (
                  PARTITION BY lane_kind, request_id, device, stream ORDER BY start_ns, end_ns
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM act_w WHERE end_ns > start_ns
), act_g AS (  -- a new interval where the gap to all earlier activity is a tolerance or more
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns - prev_end >= tol THEN 1 ELSE 0 END)
                  OVER (PARTITION BY lane_kind, request_id, device, stream
                        ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS grp
    FROM act_o
), cat AS (  -- the category with the most time in each interval
    SELECT lane_kind, request_id, device, stream, grp, arg_max(category, cat_ns) AS category
    FROM (SELECT lane_kind, request_id, device, stream, grp, category,
                 sum(end_ns - start_ns) AS cat_ns
          FROM act_g GROUP BY lane_kind, request_id, device, stream, grp, category)
    GROUP BY lane_kind, request_id, device, stream, grp
), gpu_lanes AS (  -- busy = span minus the gaps inside (tk_union_ns's rule)
    SELECT g.lane_kind, CAST(NULL AS BIGINT) AS pid, CAST(NULL AS BIGINT) AS tid, 0 AS depth,
           g.device, g.stream, g.request_id, c.category AS name, g.start_ns, g.end_ns, g.merged, g.busy_ns, g.tol
    FROM (SELECT lane_kind, request_id, device, stream, grp, min(start_ns) AS start_ns,
                 max(end_ns) AS end_ns, count(*) AS merged, min(tol) AS tol,
                 max(end_ns) - min(start_ns)
                     - coalesce(sum(start_ns - prev_end)
                                FILTER (WHERE start_ns > prev_end AND prev_end IS NOT NULL
                                        AND start_ns - prev_end < tol), 0) AS busy_ns
          FROM act_g GROUP BY lane_kind, request_id, device, stream, grp) g
    JOIN cat c ON c.lane_kind = g.lane_kind AND c.request_id IS NOT DISTINCT FROM g.request_id
     AND c.device = g.device AND c.stream IS NOT DISTINCT FROM g.stream AND c.grp = g.grp
), lanes AS (
    SELECT * FROM host_lanes UNION ALL SELECT * FROM gpu_lanes
)
SELECT $trace_id::INTEGER AS trace_id, l.lane_kind,
       CASE l.lane_kind WHEN 'requests' THEN 0 WHEN 'stages' THEN 1 WHEN 'blocking' THEN 2
                        WHEN 'gpu' THEN 3 WHEN 'stream' THEN 4 ELSE 5 END AS lane_key,
       l.pid, l.tid, l.depth, l.device, l.stream, l.request_id, l.name,
       (l.start_ns - s.t0) / 1e6 AS start_ms, (l.end_ns - s.t0) / 1e6 AS end_ms, l.merged,
       l.busy_ns / 1e6 AS busy_ms, s.t0 AS origin_ns, (s.w0 - s.t0) / 1e6 AS window_start_ms,
       (s.w1 - s.t0) / 1e6 AS window_end_ms, l.tol / 1e6 AS merge_ms
FROM lanes l CROSS JOIN span s
ORDER BY lane_key, l.pid NULLS FIRST, l.tid NULLS FIRST, l.depth, l.device NULLS FIRST,
         l.stream NULLS FIRST, l.request_id NULLS FIRST, start_ms, end_ms, l.name;
