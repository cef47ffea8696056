-- name: nvtx_summary
-- returns: one row per (range name, style): trace_id, name, style ('PushPop' | 'StartEnd'; '' for non-NVTX ranges), instances, total_ns, avg_ns, med_ns, min_ns, max_ns, stddev_ns, time_pct, incomplete (instances that were never closed)
-- param: $trace_id INTEGER trace to summarize
-- default: $trace_id 1
-- The figures of `nsys stats -r nvtxsum` (nvtx_sum in newer nsys): every host range, grouped by
-- name and style; avg, median and sample stddev rounded to 0.1 ns as nsys prints them; time_pct
-- is a share of the summed range time, not of wall time. Unclosed ranges end at the last NVTX
-- timestamp (the nsys rule), so an open outer range soaks up the rest of the trace.
WITH r AS (
    SELECT name, coalesce(args->>'style', '') AS style, dur_ns,
           (args->>'incomplete') IS NOT NULL AS incomplete
    FROM events
    WHERE trace_id = $trace_id AND kind = 'range'
), s AS (
    SELECT name, style, count(*) AS instances, sum(dur_ns)::BIGINT AS total_ns,
           round(avg(dur_ns), 1) AS avg_ns, round(median(dur_ns), 1) AS med_ns,
           min(dur_ns) AS min_ns, max(dur_ns) AS max_ns,
           round(coalesce(stddev_samp(dur_ns), 0), 1) AS stddev_ns,
           count(*) FILTER (WHERE incomplete) AS incomplete
    FROM r
    GROUP BY name, style
)
SELECT $trace_id::INTEGER AS trace_id, name, style, instances, total_ns, avg_ns, med_ns, min_ns,
       max_ns, stddev_ns,
       round(total_ns * 100.0 / nullif(sum(total_ns) OVER (), 0), 1) AS time_pct, incomplete
FROM s
ORDER BY total_ns DESC, name, style;
