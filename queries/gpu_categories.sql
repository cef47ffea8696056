-- name: gpu_categories
-- returns: one row per GPU device and activity category: trace_id, device, category, count, total_ms, share_of_device, top_kernel (short name of the kernel with the most time, kernels counted by full name), top_kernel_ms
-- param: $trace_id INTEGER trace to break down
-- default: $trace_id 1
-- GPU activity by category (GEMM, attention, convolution, normalization, embedding,
-- elementwise/reduction, communication, memcpy <direction>, memset, other: rules in
-- tracekit/categories.toml, tk_gpu_activity). total_ms is a plain sum of activity durations,
-- each activity in exactly one category; share_of_device = total / the device's summed
-- activity time (shares of a device add up to 100%).
WITH a AS (
    FROM tk_gpu_activity($trace_id)
), per_name AS (  -- by the full name: kernels whose short names agree stay apart
    SELECT device, category, name, min(short_name) AS short_name, sum(dur_ns) AS ns
    FROM a GROUP BY device, category, name
), top AS (
    SELECT device, category, arg_max(short_name, (ns, name)) AS top_kernel,
           max(ns) AS top_ns
    FROM per_name GROUP BY ALL
), c AS (
    SELECT device, category, count(*) AS n, sum(dur_ns) AS ns FROM a GROUP BY ALL
)
SELECT $trace_id::INTEGER AS trace_id, c.device, c.category, c.n AS count,
       c.ns / 1e6 AS total_ms, c.ns / nullif(sum(c.ns) OVER (PARTITION BY c.device), 0)
           AS share_of_device,
       t.top_kernel, t.top_ns / 1e6 AS top_kernel_ms
FROM c JOIN top t USING (device, category)
ORDER BY c.device, c.ns DESC, c.category;
