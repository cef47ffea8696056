-- name: python_functions
-- returns: per stage, the top functions by self time (at least $limit, more until they cover $cover of the stage, at most 3 x $limit): trace_id, stage, rank, name, kind ('python' | 'cpu_op'), via, calls, self_ms, share_of_stage, share_cumulative, stage_ms, coverage
-- param: $trace_id INTEGER trace to read
-- param: $limit INTEGER functions kept per stage at least
-- param: $cover DOUBLE share of the stage host time the list extends to cover
-- default: $trace_id 1
-- default: $limit 15
-- default: $cover 0.8
-- What runs inside a stage when it is not only aten ops: Python functions and the native calls
-- they make (`<built-in method encode_batch of tokenizers.Tokenizer>`), from torch.profiler's
-- Python events (`tracekit capture --python`), ranked with the stage's aten ops by self time.
-- Object addresses (` at 0x...`) are dropped from names so runs compare. A parent stage keeps
-- its nested stages' functions (`via` names the child), as in top_ops. share_of_stage = self
-- time / the stage's host time; coverage = all listed kinds' self time / the stage's host
-- time (what the list can explain at most). Python self time is spread thin (a flat tail of
-- interpreter frames), so a fixed top 15 can stop short of the answer: the list goes on past
-- $limit until share_cumulative reaches $cover, capped at 3 x $limit. A record_function range
-- starts inside torch's enter call and outlives it; its duration is taken back out of the self
-- time of the Python function around that call (the stage wrapper), where the nesting would
-- put it.
WITH RECURSIVE ev AS (
    SELECT * FROM events
    WHERE trace_id = $trace_id AND kind IN ('python', 'cpu_op', 'range')
), up(range_id, r_end, r_dur, node) AS (  -- from each range that outlives its parent upward
    SELECT r.event_id, r.end_ns, r.dur_ns, r.parent_id
    FROM ev r JOIN ev p ON p.event_id = r.parent_id
    WHERE r.kind = 'range' AND r.end_ns > p.end_ns
    UNION ALL
    SELECT u.range_id, u.r_end, u.r_dur, n.parent_id
    FROM up u JOIN ev n ON n.event_id = u.node
    WHERE n.end_ns < u.r_end AND n.parent_id IS NOT NULL
), misnested AS (  -- ... to the first ancestor that really contains it
    SELECT u.node AS event_id, sum(u.r_dur) AS ns
    FROM up u JOIN ev n ON n.event_id = u.node
    WHERE n.end_ns >= u.r_end
    GROUP BY u.node
), fn AS (
    SELECT e.stage, regexp_replace(e.name, ' at 0x[0-9a-fA-F]+', '', 'g') AS name, e.kind,
           greatest(e.self_ns - coalesce(m.ns, 0), 0) AS self_ns
    FROM ev e LEFT JOIN misnested m USING (event_id)
    WHERE e.kind IN ('python', 'cpu_op') AND e.stage IS NOT NULL
), st AS (
    SELECT * FROM stages WHERE trace_id = $trace_id
), anc AS (  -- every ancestor of each nested stage (tracekit/macros.sql)
    FROM tk_stage_ancestors($trace_id)
), placed AS (
    SELECT stage AS st_name, name, kind, NULL::VARCHAR AS via, self_ns FROM fn
    UNION ALL
    SELECT a.ancestor, f.name, f.kind, a.via, f.self_ns FROM fn f JOIN anc a ON a.stage = f.stage
), agg AS (
    SELECT st_name AS stage, name, kind, via, count(*) AS calls, sum(self_ns) AS self_ns
    FROM placed GROUP BY ALL
), stage_host AS (
    SELECT stage, sum(dur_ns) AS ns FROM st GROUP BY stage
), ranked AS (
    SELECT a.*, h.ns AS stage_ns,
           row_number() OVER (PARTITION BY a.stage
                              ORDER BY a.self_ns DESC, a.name, a.kind, a.via NULLS FIRST) AS rank,
           sum(a.self_ns) OVER (PARTITION BY a.stage
                                ORDER BY a.self_ns DESC, a.name, a.kind, a.via NULLS FIRST
                                ROWS UNBOUNDED PRECEDING) AS cum_ns,  -- no named window: Spark
           sum(a.self_ns) OVER (PARTITION BY a.stage) AS all_ns   -- cannot extend one
    FROM agg a JOIN stage_host h USING (stage)
)
SELECT $trace_id::INTEGER AS trace_id, stage, rank, name, kind, via, calls,
       self_ns / 1e6 AS self_ms,
       CASE WHEN stage_ns > 0 THEN self_ns / stage_ns END AS share_of_stage,
       CASE WHEN stage_ns > 0 THEN cum_ns / stage_ns END AS share_cumulative,
       stage_ns / 1e6 AS stage_ms,
       CASE WHEN stage_ns > 0 THEN all_ns / stage_ns END AS coverage
FROM ranked
WHERE rank <= $limit OR (cum_ns - self_ns < $cover * stage_ns AND rank <= 3 * $limit)
ORDER BY stage, rank;
