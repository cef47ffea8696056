-- name: graph_replay
-- returns: one row: trace_id, graph_launches, replayed_kernels, replayed_ms, kernels, kernel_ms, share_of_kernel_time
-- param: $trace_id INTEGER trace to examine
-- default: $trace_id 1
-- GPU work replayed from CUDA/HIP graphs: kernels whose launching runtime call
-- (events.launch_id) is a graph launch (cudaGraphLaunch, hipGraphLaunch, cuGraphLaunch).
-- Such kernels take the stage of their graph launch, like any launched kernel. replayed_ms and
-- kernel_ms are plain sums of kernel durations (streams may overlap); share_of_kernel_time =
-- replayed_ms / kernel_ms.
WITH k AS (
    SELECT k.dur_ns, l.name IS NOT NULL AND l.name ILIKE '%graphlaunch%' AS replayed
    FROM events k LEFT JOIN events l ON l.trace_id = k.trace_id AND l.event_id = k.launch_id
    WHERE k.trace_id = $trace_id AND k.kind = 'kernel'
)
SELECT $trace_id::INTEGER AS trace_id,
       (SELECT count(*) FROM events WHERE trace_id = $trace_id AND kind = 'runtime'
          AND name ILIKE '%graphlaunch%') AS graph_launches,
       count(*) FILTER (WHERE replayed) AS replayed_kernels,
       coalesce(sum(dur_ns) FILTER (WHERE replayed), 0) / 1e6 AS replayed_ms,
       count(*) AS kernels, coalesce(sum(dur_ns), 0) / 1e6 AS kernel_ms,
       (coalesce(sum(dur_ns) FILTER (WHERE replayed), 0) / nullif(sum(dur_ns), 0))::DOUBLE
           AS share_of_kernel_time
FROM k
ORDER BY trace_id;
