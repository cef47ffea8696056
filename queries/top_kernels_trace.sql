-- name: top_kernels_trace
-- returns: the trace's top $limit kernels by GPU time, all stages together: trace_id, rank, name (full name), short_name (for display), category, devices, count, total_ms, mean_ms, max_ms, share_of_kernel_time
-- param: $trace_id INTEGER trace to rank kernels in
-- param: $limit INTEGER kernels kept
-- default: $trace_id 1
-- default: $limit 15
-- One trace-wide ranking of kernels (top_kernels ranks them per stage): kernels are grouped by
-- their FULL name, never by the shortened one (short_name is for display only), so two
-- template instantiations with one short name are two rows. share_of_kernel_time = the
-- kernel's summed duration / all kernels' summed duration (plain sums, as gpu_categories).
-- Copies and memsets are not kernels and are not ranked here.
WITH k AS (
    SELECT name, short_name, category, device, dur_ns FROM tk_gpu_activity($trace_id)
    WHERE kind = 'kernel'
), per AS (
    SELECT name, min(short_name) AS short_name, min(category) AS category,
           count(DISTINCT device) AS devices, count(*) AS n, sum(dur_ns) AS ns,
           avg(dur_ns) AS mean_ns, max(dur_ns) AS max_ns
    FROM k GROUP BY name
), ranked AS (
    SELECT *, row_number() OVER (ORDER BY ns DESC, name) AS rank,
           ns / nullif(sum(ns) OVER (), 0) AS share
    FROM per
)
SELECT $trace_id::INTEGER AS trace_id, rank, name, short_name, category, devices, n AS count,
       ns / 1e6 AS total_ms, mean_ns / 1e6 AS mean_ms, max_ns / 1e6 AS max_ms,
       share AS share_of_kernel_time
FROM ranked WHERE rank <= $limit
ORDER BY rank;
