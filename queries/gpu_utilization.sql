-- name: gpu_utilization
-- returns: trace_id, scope ('trace' | 'stage' | 'request'), name (stage name, request id, or 'trace'), request_id, windows, window_ms, busy_ms, idle_ms, utilization
-- param: $trace_id INTEGER trace to measure
-- default: $trace_id 1
-- GPU busy/idle inside host windows: the whole trace span, each stage (its range instances,
-- summed) and each request. busy = length of the union of all GPU intervals (kernel, memcpy,
-- memset; every device and stream together) clipped to the window, whoever launched them;
-- utilization = busy / window. The GPU intervals are first merged into disjoint islands, so
-- overlapping streams are never counted twice.
WITH gpu AS (
    SELECT start_ns, end_ns,
           max(end_ns) OVER (ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset') AND end_ns > start_ns
), island_starts AS (  -- an interval that starts after all earlier ones ended opens an island
    SELECT start_ns AS i0, prev_end FROM gpu WHERE prev_end IS NULL OR start_ns > prev_end
), islands AS (  -- ...which lasts until the next island's prev_end (or the last end of all)
    -- (one window over the intervals, then one over the islands: a second running window
    -- over every interval doubled the time and memory at 5e6 kernels)
    SELECT i0, coalesce(lead(prev_end) OVER (ORDER BY i0),
                        (SELECT max(end_ns) FROM events
                         WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
                           AND end_ns > start_ns)) AS i1
    FROM island_starts
), cum AS (  -- busy time before each island starts (islands are disjoint)
    SELECT i0, i1, sum(i1 - i0) OVER (ORDER BY i0 ROWS UNBOUNDED PRECEDING) - (i1 - i0) AS before
    FROM islands
), windows AS (
    SELECT 'trace' AS scope, 0 AS scope_order, 'trace' AS name, NULL::BIGINT AS request_id,
           0 AS wid, start_ns AS w0, start_ns + duration_ns AS w1, 0::BIGINT AS first_ns
    FROM traces WHERE trace_id = $trace_id
    UNION ALL
    SELECT 'stage', 1, stage, NULL, event_id, start_ns, end_ns, min(start_ns) OVER (PARTITION BY stage)
    FROM stages WHERE trace_id = $trace_id
    UNION ALL
    SELECT 'request', 2, request_id::VARCHAR, request_id, request_id, start_ns, end_ns, start_ns
    FROM requests WHERE trace_id = $trace_id
), points AS (  -- both ends of every window, for one ASOF join instead of two
    SELECT scope, wid, -1 AS sign, w0 AS t FROM windows
    UNION ALL
    SELECT scope, wid, 1, w1 FROM windows
), merged AS (  -- islands and points in one sequence; an island sorts before a point at its start
    SELECT i0 AS t, 0 AS is_point, i0, i1, before,
           CAST(NULL AS VARCHAR) AS scope, CAST(NULL AS BIGINT) AS wid, 0 AS sign
    FROM cum
    UNION ALL
    SELECT t, 1, NULL, NULL, NULL, scope, wid, sign FROM points
), carried AS (  -- each point with the last island starting at or before it: islands are
    -- disjoint and in order, so their i0, i1 and before all grow and running maxima carry them
    -- (portable SQL for an ASOF join: Spark and Trino have none)
    SELECT is_point, scope, wid, sign, t,
           max(i0) OVER (ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS i0,
           max(i1) OVER (ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS i1,
           max(before) OVER (ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS before
    FROM merged
), busy_at AS (  -- busy time up to a point t
    SELECT scope, wid, sign * coalesce(before + least(greatest(t - i0, 0), i1 - i0), 0) AS ns
    FROM carried WHERE is_point = 1
), busy AS (
    SELECT scope, wid, sum(ns) AS ns FROM busy_at GROUP BY scope, wid
), per_window AS (
    SELECT w.*, w.w1 - w.w0 AS window_ns, coalesce(b.ns, 0) AS busy_ns
    FROM windows w LEFT JOIN busy b USING (scope, wid)
)
SELECT $trace_id::INTEGER AS trace_id, scope, name, min(request_id) AS request_id,
       count(*) AS windows, sum(window_ns) / 1e6 AS window_ms, sum(busy_ns) / 1e6 AS busy_ms,
       (sum(window_ns) - sum(busy_ns)) / 1e6 AS idle_ms,
       sum(busy_ns) / nullif(sum(window_ns), 0) AS utilization
FROM per_window
GROUP BY scope, scope_order, name
ORDER BY scope_order, min(first_ns), name;
