-- name: host_waits
-- returns: one row: trace_id, span_ms, kernels, median_kernel_us, short_kernels (under 10 us), launch_calls, launch_api_ms, sync_calls, sync_ms, item_calls, item_ms, dataloader_ms, runtime_ms
-- param: $trace_id INTEGER trace to examine
-- default: $trace_id 1
-- CPU-side evidence for why a GPU idles, for the findings that name a cause. Launches: runtime
-- calls named *Launch* (cudaLaunchKernel, cuLaunchKernelEx ...) and their summed API time.
-- Host syncs: runtime calls named *Synchronize* (cudaStreamSynchronize, cudaDeviceSynchronize,
-- cudaEventSynchronize ...) and host-side `sync` rows, time as the union of those intervals
-- per thread (nested driver calls count once); item: torch ops that wait for a GPU value
-- (aten::item, aten::_local_scalar_dense, aten::nonzero). dataloader_ms: union of host ranges,
-- ops and Python frames whose name says data loading (DataLoader, _next_data, __next__ of a
-- dataloader). runtime_ms: summed time of all runtime/driver API calls.
WITH k AS (
    SELECT dur_ns FROM events WHERE trace_id = $trace_id AND kind = 'kernel'
), rt AS (  -- (ILIKE, not a case-blind regex: 10x faster over a million API calls)
    SELECT name, dur_ns, name ILIKE '%launch%' AS is_launch FROM events
    WHERE trace_id = $trace_id AND kind = 'runtime'
), sync_iv AS (
    SELECT {'pid': pid, 'tid': tid} AS key, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND tid IS NOT NULL
      AND ((kind = 'runtime' AND name ILIKE '%synchronize%')
           OR kind = 'sync')
), sync_n AS (
    SELECT count(*) AS n FROM events
    WHERE trace_id = $trace_id AND tid IS NOT NULL AND kind = 'runtime'
      AND name ILIKE '%synchronize%' AND NOT regexp_matches(name, '^cu[A-Z]')
), item AS (
    SELECT count(*) AS n, coalesce(sum(dur_ns), 0) AS ns FROM events
    WHERE trace_id = $trace_id AND kind IN ('cpu_op', 'range')
      AND regexp_matches(tk_op_name(name), '^aten::(item|_local_scalar_dense|nonzero)$')
      AND NOT EXISTS (SELECT 1 FROM events p WHERE p.trace_id = $trace_id
                      AND p.event_id = events.parent_id
                      AND regexp_matches(tk_op_name(p.name), '^aten::(item|_local_scalar_dense|nonzero)$'))
), dl_iv AS (
    SELECT {'pid': pid, 'tid': tid} AS key, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND tid IS NOT NULL AND kind IN ('range', 'cpu_op', 'python')
      AND regexp_matches(name, '(?i)dataloader|_next_data|data_loader|fetch_batch')
)
SELECT $trace_id::INTEGER AS trace_id,
       (SELECT duration_ns FROM traces WHERE trace_id = $trace_id) / 1e6 AS span_ms,
       (SELECT count(*) FROM k) AS kernels,
       (SELECT quantile_cont(dur_ns, 0.5) FROM k) / 1e3 AS median_kernel_us,
       (SELECT count(*) FROM k WHERE dur_ns < 10000) AS short_kernels,
       (SELECT count(*) FROM rt WHERE is_launch) AS launch_calls,
       (SELECT coalesce(sum(dur_ns), 0) FROM rt WHERE is_launch) / 1e6
           AS launch_api_ms,
       (SELECT n FROM sync_n) AS sync_calls,
       (SELECT coalesce(sum(union_ns), 0) FROM tk_union_ns('sync_iv')) / 1e6 AS sync_ms,
       (SELECT n FROM item) AS item_calls, (SELECT ns FROM item) / 1e6 AS item_ms,
       (SELECT coalesce(sum(union_ns), 0) FROM tk_union_ns('dl_iv')) / 1e6 AS dataloader_ms,
       (SELECT coalesce(sum(dur_ns), 0) FROM rt) / 1e6 AS runtime_ms
ORDER BY trace_id;
