-- name: compare_kernels
-- returns: one row per (trace_id, kernel name, device): trace_id, name, device, count, total_ms, sq_ms2, max_ms
-- GPU kernels over every trace in the store, per trace and device, for tracekit diff and
-- `tracekit check --no-new-top-kernels`. count, total and sum of squared durations (ms²) give
-- the mean per call and its variance (the noise of a per-call change); device -1 when the
-- source has none.
SELECT trace_id, name, coalesce(device, -1) AS device,
       count(*) AS count,
       sum(dur_ns) / 1e6 AS total_ms,
       sum((dur_ns / 1e6) * (dur_ns / 1e6)) AS sq_ms2,
       max(dur_ns) / 1e6 AS max_ms
FROM events
WHERE kind = 'kernel'
GROUP BY ALL
ORDER BY trace_id, total_ms DESC, name, device;
