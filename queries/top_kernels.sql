-- name: top_kernels
-- returns: per stage, the top $limit kernels by GPU time: trace_id, stage ('(no stage)' for kernels no stage launched), rank, name, launched_by (the host op that launched it most often; a tie goes to the smallest name), launch_ops (distinct launching ops), count, total_ms, mean_ms, p50_ms, p99_ms, max_ms, share_of_stage_gpu, coverage
-- param: $trace_id INTEGER trace to rank kernels in
-- param: $limit INTEGER kernels kept per stage
-- default: $trace_id 1
-- default: $limit 15
-- Each kernel event is counted once, in the stage of the runtime call that launched it.
-- launched_by: launch_id -> runtime call -> its parent chain (8 levels) to the nearest cpu_op (for
-- traces without cpu_ops, the nearest NVTX range that is not a tracekit range); Kineto kernels
-- without that chain are linked by External id to their cpu_op. Percentiles are
-- quantile_cont over kernel durations. coverage = share of the trace's kernel time that is
-- attributed to some stage (the same value on every row).
WITH k AS (
    SELECT trace_id, event_id, name, dur_ns, stage, launch_id, external_id FROM events
    WHERE trace_id = $trace_id AND kind = 'kernel'
), has_ops AS (
    SELECT count(*) > 0 AS yes FROM events WHERE trace_id = $trace_id AND kind = 'cpu_op'
), anc AS MATERIALIZED (  -- host events that enclose others: all a chain can climb through
    SELECT e.event_id, e.parent_id,
           (has_ops.yes AND e.kind = 'cpu_op')
           OR (NOT has_ops.yes AND e.kind = 'range' AND e.name NOT LIKE 'tracekit:%') AS is_op
    FROM events e, has_ops
    WHERE e.trace_id = $trace_id AND e.tid IS NOT NULL
      AND e.event_id IN (SELECT parent_id FROM events
                         WHERE trace_id = $trace_id AND parent_id IS NOT NULL)
), kp AS (  -- each kernel with the parent of the runtime call that launched it
    SELECT k.*, r.parent_id AS launch_parent
    FROM k LEFT JOIN events r
      ON r.trace_id = k.trace_id AND r.kind = 'runtime' AND r.event_id = k.launch_id
), parents AS (SELECT DISTINCT launch_parent AS id FROM kp WHERE launch_parent IS NOT NULL
), op_id_of_parent AS (  -- up the chain from the launch's parent: the nearest op, 8 levels
    SELECT p.id,
           CASE WHEN a1.is_op THEN a1.event_id WHEN a2.is_op THEN a2.event_id
                WHEN a3.is_op THEN a3.event_id WHEN a4.is_op THEN a4.event_id
                WHEN a5.is_op THEN a5.event_id WHEN a6.is_op THEN a6.event_id
                WHEN a7.is_op THEN a7.event_id WHEN a8.is_op THEN a8.event_id END AS op_id
    FROM parents p
    JOIN anc a1 ON a1.event_id = p.id
    LEFT JOIN anc a2 ON a2.event_id = a1.parent_id
    LEFT JOIN anc a3 ON a3.event_id = a2.parent_id
    LEFT JOIN anc a4 ON a4.event_id = a3.parent_id
    LEFT JOIN anc a5 ON a5.event_id = a4.parent_id
    LEFT JOIN anc a6 ON a6.event_id = a5.parent_id
    LEFT JOIN anc a7 ON a7.event_id = a6.parent_id
    LEFT JOIN anc a8 ON a8.event_id = a7.parent_id
), op_of_parent AS (
    SELECT o.id, tk_op_name(e.name) AS op  -- one op, not one per emit_nvtx call (op_id = N)
    FROM op_id_of_parent o JOIN events e ON e.trace_id = $trace_id AND e.event_id = o.op_id
), op_of_ext AS (
    SELECT external_id, tk_op_name(arg_min(name, event_id)) AS op FROM events
    WHERE trace_id = $trace_id AND kind = 'cpu_op' AND external_id IS NOT NULL
      AND external_id <> 0
    GROUP BY external_id
), kk AS (
    SELECT kp.*, coalesce(l.op, x.op) AS op
    FROM kp LEFT JOIN op_of_parent l ON l.id = kp.launch_parent
    LEFT JOIN op_of_ext x ON x.external_id = kp.external_id
), per_kernel AS (
    SELECT coalesce(stage, '(no stage)') AS stage, name,
           count(DISTINCT op) AS launch_ops, count(*) AS n, sum(dur_ns) AS total_ns,
           avg(dur_ns) AS mean_ns, quantile_cont(dur_ns, 0.5) AS p50,
           quantile_cont(dur_ns, 0.99) AS p99, max(dur_ns) AS max_ns
    FROM kk GROUP BY ALL
), op_n AS (  -- launches per (stage, kernel, op)
    SELECT coalesce(stage, '(no stage)') AS stage, name, op, count(*) AS n
    FROM kk WHERE op IS NOT NULL GROUP BY ALL
), top_op AS (  -- launched_by: the most frequent op, a tie to the smallest name (not mode():
                -- DuckDB and Spark break its ties differently)
    SELECT stage, name, op FROM (
        SELECT *, row_number() OVER (PARTITION BY stage, name ORDER BY n DESC, op) AS r
        FROM op_n
    ) WHERE r = 1
), agg AS (
    SELECT k.*, t.op AS launched_by
    FROM per_kernel k
    LEFT JOIN top_op t ON t.stage = k.stage AND t.name IS NOT DISTINCT FROM k.name
), cov AS (
    SELECT coalesce(sum(dur_ns) FILTER (WHERE stage IS NOT NULL), 0) / nullif(sum(dur_ns), 0)
           AS coverage
    FROM k
), ranked AS (
    SELECT a.*, sum(total_ns) OVER (PARTITION BY stage) AS stage_ns,
           row_number() OVER (PARTITION BY stage ORDER BY total_ns DESC, name) AS rank
    FROM agg a
)
SELECT $trace_id::INTEGER AS trace_id, r.stage, r.rank, r.name, r.launched_by, r.launch_ops,
       r.n AS count, r.total_ns / 1e6 AS total_ms, r.mean_ns / 1e6 AS mean_ms,
       r.p50 / 1e6 AS p50_ms, r.p99 / 1e6 AS p99_ms, r.max_ns / 1e6 AS max_ms,
       r.total_ns / nullif(r.stage_ns, 0) AS share_of_stage_gpu, cov.coverage
FROM ranked r CROSS JOIN cov
WHERE r.rank <= $limit
ORDER BY r.stage = '(no stage)', r.stage, r.rank;
