-- name: nvtx_gpu_projection
-- returns: one row per host range that launched GPU work: trace_id, event_id, name, style, pid, tid, start_ns, dur_ns (the range itself), proj_start_ns, proj_end_ns, proj_dur_ns (its GPU projection), gpu_ops, level, parent_id, num_child, range_stack
-- param: $trace_id INTEGER trace to project
-- default: $trace_id 1
-- per_trace: over many traces at once its interval joins become nested loops (8.3 s vs 0.8 s)
-- NVTX GPU projection as `nsys stats -r nvtxgpuproj` computes it: a GPU op (kernel, memcpy,
-- memset) belongs to every range on the launching thread that wholly contains the CUDA API call
-- with its correlation id (same process); a range's projection spans its ops' first GPU start
-- to last GPU end (idle gaps included), gpu_ops counts distinct correlation ids. Ranges ended
-- on another thread are left out. parent_id is the tightest enclosing range on the thread,
-- level the number of enclosing ranges (the stack depth when ranges nest), num_child the
-- projected children, range_stack the enclosing event_ids. Outer levels include inner levels'
-- ops: never sum proj_dur_ns across levels.
WITH rg AS NOT MATERIALIZED (
    -- Interval keys: (thread, time) packed into one 128-bit integer, thread first, so "contains, on
    -- the same thread" is two inequalities, which DuckDB answers with an inequality join
    -- instead of a per-thread cross product. pid and tid must fit in 32 bits, times in 62; a
    -- NULL pid or tid gives a NULL key, which joins nothing.
    SELECT e.event_id, e.name, e.args->>'style' AS style, e.pid, e.tid, e.start_ns, e.end_ns,
           ((e.pid + 2147483648)::HUGEINT * 4294967296 + (e.tid + 2147483648))
               * 4611686018427387904 + e.start_ns AS ks,
           ((e.pid + 2147483648)::HUGEINT * 4294967296 + (e.tid + 2147483648))
               * 4611686018427387904 + e.end_ns AS ke
    FROM events e
    WHERE e.trace_id = $trace_id AND e.kind = 'range' AND (e.args->>'endTid') IS NULL
), api AS NOT MATERIALIZED (  -- CUDA API calls (a plain scan: keeps the join estimates)
    SELECT r.event_id, r.pid, r.correlation,
           ((r.pid + 2147483648)::HUGEINT * 4294967296 + (r.tid + 2147483648))
               * 4611686018427387904 + r.start_ns AS ks,
           ((r.pid + 2147483648)::HUGEINT * 4294967296 + (r.tid + 2147483648))
               * 4611686018427387904 + r.end_ns AS ke
    FROM events r
    WHERE r.trace_id = $trace_id AND r.kind = 'runtime' AND r.correlation IS NOT NULL
), inside AS (  -- (range, API call inside it on the same thread)
    SELECT rg.event_id, api.event_id AS api_id, api.pid, api.correlation
    FROM rg JOIN api ON rg.ks <= api.ks AND rg.ke >= api.ke
), launched AS (  -- the GPU span of the ops each API call launched
    SELECT r.event_id AS api_id, min(g.start_ns) AS gs, max(g.end_ns) AS ge
    FROM events r
    JOIN events g
      ON g.trace_id = r.trace_id AND g.correlation = r.correlation
     AND g.kind IN ('kernel', 'memcpy', 'memset') AND (g.pid IS NULL OR g.pid = r.pid)
    WHERE r.trace_id = $trace_id AND r.kind = 'runtime'
    GROUP BY r.event_id
), proj AS (
    SELECT i.event_id, min(l.gs) AS ps, max(l.ge) AS pe,
           count(DISTINCT i.correlation) AS gpu_ops
    FROM inside i JOIN launched l USING (api_id)
    GROUP BY i.event_id
), enc AS NOT MATERIALIZED (  -- every (range, enclosing range) pair on the same thread
    SELECT c.event_id, p.event_id AS outer_id, p.start_ns, p.end_ns,
           (c.start_ns - p.start_ns) + (p.end_ns - c.end_ns) AS slack
    FROM rg c JOIN rg p ON p.ks <= c.ks AND p.ke >= c.ke
    WHERE p.event_id <> c.event_id  -- of two identical intervals the earlier one is outside
      AND (p.start_ns < c.start_ns OR p.end_ns > c.end_ns OR p.event_id < c.event_id)
), par AS (
    SELECT event_id, arg_min(outer_id, slack) AS parent_id, count(*) AS level,
           string_agg(outer_id::VARCHAR, ':' ORDER BY start_ns, end_ns DESC, outer_id) AS stack
    FROM enc
    GROUP BY event_id
), pp AS (
    SELECT rg.event_id, rg.name, rg.style, rg.pid, rg.tid, rg.start_ns, rg.end_ns, proj.ps,
           proj.pe, proj.gpu_ops, coalesce(par.level, 0) AS level, par.parent_id,
           coalesce(':' || par.stack, '') || ':' || proj.event_id AS range_stack
    FROM proj JOIN rg USING (event_id) LEFT JOIN par USING (event_id)
), counted AS (
    -- num_child in one pass (every CTE here is read once, which keeps DuckDB's inequality
    -- joins): each row is emitted once as itself and once as a child mark under its parent.
    SELECT pp.*, u.is_child,
           count(*) FILTER (WHERE u.is_child) OVER (PARTITION BY u.k) AS num_child
    FROM pp, unnest([{'k': pp.event_id, 'is_child': false},
                     {'k': pp.parent_id, 'is_child': true}]) AS t(u)
)
SELECT $trace_id::INTEGER AS trace_id, event_id, name, style, pid, tid, start_ns,
       end_ns - start_ns AS dur_ns, ps AS proj_start_ns, pe AS proj_end_ns,
       pe - ps AS proj_dur_ns, gpu_ops, level, parent_id, num_child, range_stack
FROM counted
WHERE NOT is_child
ORDER BY proj_start_ns, proj_dur_ns DESC, event_id;
