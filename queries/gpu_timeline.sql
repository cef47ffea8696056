-- name: gpu_timeline
-- returns: per device, the trace span cut into $bins equal bins: trace_id, device, bin, start_ms (from trace start), bin_ms, busy_ms, busy_share
-- param: $trace_id INTEGER trace to read
-- param: $bins INTEGER bins across the trace span
-- default: $trace_id 1
-- default: $bins 200
-- GPU busy over time, for the report's per-device strip. busy_ms = the length of the union of
-- the device's kernel, memcpy and memset intervals (all streams together: tk_islands) inside
-- the bin, so the bins of a device add up to its busy time in gpu_devices. Computed as the
-- device's busy time up to each bin edge, differenced: islands and edges in one sequence with
-- running maxima (the portable form of an as-of join, as in gpu_utilization.sql).
WITH iv AS (
    SELECT coalesce(device, -1) AS key, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
), islands AS (
    FROM tk_islands('iv')
), cum AS (
    SELECT key, start_ns AS i0, end_ns AS i1,
           sum(end_ns - start_ns) OVER (PARTITION BY key ORDER BY start_ns
                                        ROWS UNBOUNDED PRECEDING) - (end_ns - start_ns) AS before
    FROM islands
), span AS (
    SELECT start_ns AS t0, greatest(duration_ns, 1) / $bins::DOUBLE AS w
    FROM traces WHERE trace_id = $trace_id
), edges AS (  -- bin k runs from edge k to edge k + 1
    SELECT unnest(range(0, $bins + 1)) AS k
), points AS (
    SELECT d.key, e.k, CAST(round(s.t0 + e.k * s.w) AS BIGINT) AS t
    FROM edges e CROSS JOIN span s CROSS JOIN (SELECT DISTINCT key FROM iv) d
), merged AS (  -- an island sorts before an edge at its start
    SELECT key, i0 AS t, 0 AS is_point, i0, i1, before, CAST(NULL AS BIGINT) AS k FROM cum
    UNION ALL
    SELECT key, t, 1, NULL, NULL, NULL, k FROM points
), carried AS (
    SELECT key, is_point, k, t,
           max(i0) OVER (PARTITION BY key ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS i0,
           max(i1) OVER (PARTITION BY key ORDER BY t, is_point ROWS UNBOUNDED PRECEDING) AS i1,
           max(before) OVER (PARTITION BY key ORDER BY t, is_point ROWS UNBOUNDED PRECEDING)
               AS before
    FROM merged
), busy_at AS (  -- device busy time up to edge k
    SELECT key, k, t, coalesce(before + least(greatest(t - i0, 0), i1 - i0), 0) AS ns
    FROM carried WHERE is_point = 1
), bins AS (
    SELECT key, k, t, lead(t) OVER (PARTITION BY key ORDER BY k) - t AS bin_ns,
           lead(ns) OVER (PARTITION BY key ORDER BY k) - ns AS busy_ns
    FROM busy_at
)
SELECT $trace_id::INTEGER AS trace_id, b.key AS device, b.k AS bin, (b.t - s.t0) / 1e6 AS start_ms,
       b.bin_ns / 1e6 AS bin_ms, b.busy_ns / 1e6 AS busy_ms,
       b.busy_ns / nullif(b.bin_ns, 0) AS busy_share
FROM bins b CROSS JOIN span s
WHERE b.bin_ns IS NOT NULL
ORDER BY device, bin;
