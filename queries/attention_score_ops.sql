-- name: attention_score_ops
-- returns: one row per stage with host ops: trace_id, stage, score_self_ms, ops_self_ms, share, top_ops, shaped_ops (host ops with recorded input shapes: 0 means the trace cannot tell)
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- Attention found by what it does, not by a name list: host ops (cpu_op) working on attention
-- scores, i.e. with an input of rank >= 4 whose last two dims are equal and >= 8 ([B, H, L, L]:
-- scale mul, mask add, softmax, probs @ V), or a matmul of [B, H, L, d] by [B, H, d, L] (Q @ K^T),
-- or a fused kernel by name (scaled_dot_product, flash, sdpa, efficient_attention); ops launched
-- by such an op (its direct children: the bmm under a matmul) count with it. Rank 3 is left
-- out: [B, L, d] activations with L = d (a 64-token bucket, hidden 64) look like scores. A stage includes the ops of stages nested
-- in it (as in top_ops). share = score self time / all host-op self time in the stage. Needs
-- shapes (torch.profiler record_shapes, which tracekit capture turns on); nsys traces give no rows.
WITH ops AS (
    SELECT event_id, parent_id, stage, name, self_ns,
           try_cast(args -> 'Input Dims' AS BIGINT[][]) AS d
    FROM events WHERE trace_id = $trace_id AND kind = 'cpu_op'
), flagged AS (
    SELECT *, coalesce(
        array_length(list_filter(d, x -> array_length(x) >= 4 AND x[-1] = x[-2] AND x[-1] >= 8)) > 0
        OR (array_length(d) >= 2 AND array_length(d[1]) >= 4 AND array_length(d[2]) >= 4 AND d[1][-1] = d[2][-2]
            AND d[1][-2] = d[2][-1] AND d[1][-2] <> d[1][-1] AND d[1][-2] >= 8), false)
        OR regexp_matches(lower(name), 'scaled_dot_product|flash|sdpa|efficient_attention')
        AS own_score
    FROM ops
), scored AS (
    SELECT f.*, f.own_score OR coalesce(p.own_score, false) AS score, f.d IS NOT NULL AS shaped
    FROM flagged f LEFT JOIN flagged p ON p.event_id = f.parent_id
), anc AS (  -- every ancestor of each nested stage (tracekit/macros.sql)
    FROM tk_stage_ancestors($trace_id)
), placed AS (
    SELECT stage AS st_name, name, self_ns, score, shaped FROM scored WHERE stage IS NOT NULL
    UNION ALL
    SELECT a.ancestor, s.name, s.self_ns, s.score, s.shaped FROM scored s JOIN anc a ON a.stage = s.stage
), by_name AS (
    SELECT st_name, name, sum(self_ns) AS ns FROM placed WHERE score GROUP BY st_name, name
), named AS (  -- a join, not a correlated subquery: Spark refuses those beside GROUP BY
    SELECT st_name, string_agg(name, ', ' ORDER BY ns DESC, name) AS top_ops
    FROM by_name GROUP BY st_name
), totals AS (
    SELECT st_name, sum(self_ns) FILTER (WHERE score) AS score_ns, sum(self_ns) AS ops_ns,
           count(*) FILTER (WHERE shaped) AS shaped_ops
    FROM placed GROUP BY st_name
)
SELECT $trace_id::INTEGER AS trace_id, t.st_name AS stage, t.score_ns / 1e6 AS score_self_ms,
       t.ops_ns / 1e6 AS ops_self_ms,
       CASE WHEN t.ops_ns > 0 THEN coalesce(t.score_ns, 0) / t.ops_ns END AS share,
       n.top_ops, t.shaped_ops
FROM totals t LEFT JOIN named n USING (st_name)
ORDER BY t.st_name;
