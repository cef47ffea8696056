-- name: top_ops
-- returns: per stage, the top $limit host ops by self time: trace_id, stage ('(no stage)' for ops outside every stage), rank, name, kind, calls, self_ms, total_ms, mean_ms, share_of_stage, share_of_ops, stage_ms, stage_ops_self_ms, via
-- param: $trace_id INTEGER trace to rank ops in
-- param: $limit INTEGER ops kept per stage
-- default: $trace_id 1
-- default: $limit 15
-- Host ops are events of kind cpu_op; a trace with no cpu_op (nsys) uses its NVTX ranges that
-- are not tracekit stage/request ranges instead. Ops are grouped by name without per-call
-- numbers (tk_op_group: emit_nvtx's ', seq = N, op_id = N', a trailing '#N'). self_ms = sum of self time (duration minus
-- direct children). total_ms counts only outermost occurrences of a name on a thread, so
-- recursion (aten::to inside aten::to) is not counted twice. share_of_stage = self time /
-- the stage's host time (sum of its range durations); share_of_ops = self time / all ops' self
-- time in the stage. A parent stage keeps its nested stages' ops (attention inside
-- inference): those rows name the child stage in `via` (NULL for the stage's own ops).
WITH has_ops AS (
    SELECT count(*) > 0 AS yes FROM events WHERE trace_id = $trace_id AND kind = 'cpu_op'
), ops AS (  -- names grouped: emit_nvtx's ', seq = N, op_id = N' and '#N' dropped (tk_op_group)
    SELECT e.event_id, e.kind, tk_op_group(e.name) AS name, e.start_ns, e.end_ns, e.dur_ns,
           e.self_ns, e.pid, e.tid, e.stage
    FROM events e, has_ops
    WHERE e.trace_id = $trace_id
      AND ((has_ops.yes AND e.kind = 'cpu_op')
           OR (NOT has_ops.yes AND e.kind = 'range' AND e.name NOT LIKE 'tracekit:%'))
), marked AS (
    SELECT *, coalesce(max(end_ns) OVER (PARTITION BY pid, tid, name
                                         ORDER BY start_ns, end_ns DESC, event_id
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                       >= end_ns, false) AS nested_in_same_name
    FROM ops
), anc AS (  -- every ancestor of each nested stage (tracekit/macros.sql)
    FROM tk_stage_ancestors($trace_id)
), placed AS (
    SELECT m.*, coalesce(m.stage, '(no stage)') AS st_name, NULL::VARCHAR AS via FROM marked m
    UNION ALL
    SELECT m.*, a.ancestor, a.via FROM marked m JOIN anc a ON a.stage = m.stage
), agg AS (
    SELECT st_name AS stage, name, via, min(kind) AS kind, count(*) AS calls,
           sum(self_ns) AS self_ns,
           sum(dur_ns) FILTER (WHERE NOT nested_in_same_name) AS total_ns
    FROM placed GROUP BY st_name, name, via
), stage_host AS (
    SELECT stage, sum(dur_ns) AS ns FROM stages WHERE trace_id = $trace_id GROUP BY stage
), ranked AS (
    SELECT a.*, sum(a.self_ns) OVER (PARTITION BY a.stage) AS stage_ops_self_ns,
           row_number() OVER (PARTITION BY a.stage ORDER BY a.self_ns DESC, a.name,
                                                   a.via NULLS FIRST) AS rank
    FROM agg a
)
SELECT $trace_id::INTEGER AS trace_id, r.stage, r.rank, r.name, r.kind, r.calls,
       r.self_ns / 1e6 AS self_ms, coalesce(r.total_ns, 0) / 1e6 AS total_ms,
       r.self_ns / 1e6 / r.calls AS mean_ms,
       CASE WHEN h.ns > 0 THEN r.self_ns / h.ns END AS share_of_stage,
       CASE WHEN r.stage_ops_self_ns > 0 THEN r.self_ns / r.stage_ops_self_ns END AS share_of_ops,
       h.ns / 1e6 AS stage_ms, r.stage_ops_self_ns / 1e6 AS stage_ops_self_ms, r.via
FROM ranked r LEFT JOIN stage_host h USING (stage)
WHERE r.rank <= $limit
ORDER BY r.stage = '(no stage)', r.stage, r.rank;
