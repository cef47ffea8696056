-- tracekit SQL building blocks: DuckDB macros loaded on every connection tracekit opens
-- (tracekit.store.connect), so every query in queries/ and every `tracekit sql` statement can
-- use them. To use them in the DuckDB CLI on a store: `.read tracekit/macros.sql` (the GPU
-- category table is filled from tracekit/categories.toml by Python: without it every kernel is
-- 'other').
-- They are TEMP objects: a store file never holds them, read-only stores work.
--
-- Table macros take the *name* of a table, view or CTE (DuckDB's query_table), e.g.
--     WITH iv AS (SELECT device AS key, start_ns, end_ns FROM events WHERE kind = 'kernel')
--     SELECT * FROM tk_union_ns('iv')

-- name: tk_islands
-- returns: key, start_ns, end_ns
-- The union of the intervals of each `key` as disjoint islands (input columns: key, start_ns, end_ns).
-- tk_islands(intervals) -> (key, start_ns, end_ns): the union of the intervals of each key as
-- disjoint, maximal islands. Input columns: key (any type: a device, a (device, stream) struct,
-- a stage ...), start_ns, end_ns. Empty intervals (end <= start) are ignored.
-- One running window over the intervals, then one over the island starts (a second running
-- window over every interval doubled time and memory at 5e6 kernels). Ordered by start alone:
-- of several intervals with one start, whichever comes first opens the island (the others
-- then start before an earlier end), so the order among them changes no island and no gap.
CREATE OR REPLACE TEMP MACRO tk_islands(intervals) AS TABLE
WITH o AS (
    SELECT key, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY key ORDER BY start_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM query_table(intervals) WHERE end_ns > start_ns
), last_end AS (
    SELECT key, max(end_ns) AS end_ns FROM o GROUP BY key
), starts AS (  -- an interval that starts after all earlier ones ended opens an island ...
    SELECT key, start_ns, prev_end FROM o WHERE prev_end IS NULL OR start_ns > prev_end
)  -- ... which lasts until the next island's prev_end (or the key's last end)
SELECT s.key, s.start_ns,
       coalesce(lead(s.prev_end) OVER (PARTITION BY s.key ORDER BY s.start_ns), l.end_ns)
           AS end_ns
FROM starts s JOIN last_end l ON l.key IS NOT DISTINCT FROM s.key;

-- name: tk_union_ns
-- returns: key, union_ns, first_ns, last_ns, n
-- The length of that union per key (busy time), with the first start, last end and count.
-- tk_union_ns(intervals) -> (key, union_ns, first_ns, last_ns, n): the length of the union of
-- the intervals of each key (overlaps counted once: never a plain sum), their first start,
-- last end and count. union = span minus the gaps where an interval starts after all earlier
-- ones ended. Input as for tk_islands.
CREATE OR REPLACE TEMP MACRO tk_union_ns(intervals) AS TABLE
WITH o AS (
    SELECT key, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY key ORDER BY start_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM query_table(intervals) WHERE end_ns > start_ns
)
SELECT key,
       (max(end_ns) - min(start_ns)
        - coalesce(sum(start_ns - prev_end) FILTER (WHERE start_ns > prev_end), 0))::BIGINT
           AS union_ns,
       min(start_ns) AS first_ns, max(end_ns) AS last_ns, count(*) AS n
FROM o GROUP BY key;

-- name: tk_busy_islands
-- returns: key, island, start_ns, end_ns, busy_before_ns
-- Those islands numbered 1.. in start order per key, each with the length of the key's earlier ones (what `gpu_islands` stores per device).
-- tk_busy_islands(intervals) -> (key, island, start_ns, end_ns, busy_before_ns): tk_islands
-- numbered 1.. in start order per key, each with the length of the key's earlier islands
-- (disjoint: a running sum). What gpu_islands stores per device, and tk_busy_upto_islands
-- reads.
CREATE OR REPLACE TEMP MACRO tk_busy_islands(intervals) AS TABLE
SELECT key, row_number() OVER w AS island, start_ns, end_ns,
       coalesce(sum(end_ns - start_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                0) AS busy_before_ns
FROM tk_islands(intervals)
WINDOW w AS (PARTITION BY key ORDER BY start_ns);

-- name: tk_busy_upto_islands
-- returns: key, point_id, busy_ns
-- Per point (columns key, point_id, t), the length of the union of that key's islands before t, over islands made already (`gpu_islands` with `device AS key`).
-- tk_busy_upto_islands(islands, points) -> (key, point_id, busy_ns): tk_busy_upto over
-- islands made already, e.g. the stored ones of a device (gpu_islands: device AS key).
-- Islands: key, island (1-based in start order per key), start_ns, end_ns, busy_before_ns.
-- Islands and points go in one sequence per key: a point's row number there minus its row
-- number among the points is the number of islands that start at or before it, so the last
-- of them is found by an equi-join (the portable form of an as-of join: Spark has none).
-- Row numbers, not running maxima: three running maxima over 1.6e6 rows took 0.7 s, this 0.5 s.
CREATE OR REPLACE TEMP MACRO tk_busy_upto_islands(islands, points) AS TABLE
WITH merged AS (  -- an island sorts before a point at its start
    SELECT key, start_ns AS t, 0 AS is_point, CAST(NULL AS BIGINT) AS point_id
    FROM query_table(islands)
    UNION ALL
    SELECT key, t, 1, point_id FROM query_table(points)
), ranked AS (
    SELECT key, point_id, t, is_point,
           row_number() OVER (PARTITION BY key ORDER BY t, is_point, point_id) AS rn
    FROM merged
), counted AS (  -- k: islands starting at or before t
    SELECT key, point_id, t,
           rn - row_number() OVER (PARTITION BY key ORDER BY t, point_id) AS k
    FROM ranked WHERE is_point = 1
)
SELECT p.key, p.point_id,
       coalesce(c.busy_before_ns + least(greatest(p.t - c.start_ns, 0), c.end_ns - c.start_ns),
                0) AS busy_ns
FROM counted p LEFT JOIN query_table(islands) c
  ON c.island = p.k AND c.key IS NOT DISTINCT FROM p.key;

-- name: tk_busy_upto
-- returns: key, point_id, busy_ns
-- Per point (columns key, point_id, t), the length of the union of that key's intervals before t; two points' difference is the busy time between them.
-- tk_busy_upto(intervals, points) -> (key, point_id, busy_ns): for each point (columns key,
-- point_id, t), the length of the union of that key's intervals before t (a device's busy
-- time up to t). Differences of two points give the busy time between them (a window, a bin),
-- overlaps counted once. Intervals as for tk_islands; tk_busy_upto_islands (above) does the
-- rest.
CREATE OR REPLACE TEMP MACRO tk_busy_upto(intervals, points) AS TABLE
WITH cum AS (
    FROM tk_busy_islands(intervals)
)
SELECT * FROM tk_busy_upto_islands('cum', points);

-- name: tk_op_name
-- returns: VARCHAR
-- An op's name without torch emit_nvtx's `, seq = N, op_id = M` suffixes.
-- tk_op_name(name): an op's name without the per-call suffixes torch's emit_nvtx adds
-- ('aten::addmm, seq = 47588, op_id = 999618' -> 'aten::addmm'), so one op is one group.
CREATE OR REPLACE TEMP MACRO tk_op_name(name) AS
regexp_replace(name, ',\s*(seq|op_id|sizes)\s*=.*$', '');

-- name: tk_op_group
-- returns: VARCHAR
-- The name reports group an op under: `tk_op_name` and a trailing `#N` dropped (`ProfilerStep#12` -> `ProfilerStep`).
-- tk_op_group(name): the name a report groups an op under: tk_op_name, and a trailing '#N'
-- call number dropped ('ProfilerStep#12' -> 'ProfilerStep'), so one-call variants that
-- differ only in sequence or id numbers are one row.
CREATE OR REPLACE TEMP MACRO tk_op_group(name) AS
regexp_replace(tk_op_name(name), '#[0-9]+$', '');

-- name: tk__kn_clean
-- returns: VARCHAR
-- tk_kernel_name's helper: the name without anonymous namespaces and a leading return type.
CREATE OR REPLACE TEMP MACRO tk__kn_clean(name) AS
regexp_replace(regexp_replace(name, '(\(anonymous namespace\)|<unnamed>)::', '', 'g'),
               '^(void|int|float|auto)\s+', '');
-- name: tk__kn_templated
-- returns: BOOLEAN
-- tk_kernel_name's helper: whether the name has template arguments before its parameters.
CREATE OR REPLACE TEMP MACRO tk__kn_templated(s) AS
position('<' IN s) > 0 AND (position('(' IN s) = 0 OR position('<' IN s) < position('(' IN s));
-- name: tk__kn_short
-- returns: VARCHAR
-- tk_kernel_name's helper: the short name from the cleaned name and its qualified part.
CREATE OR REPLACE TEMP MACRO tk__kn_short(s, qualified) AS
CASE
    WHEN qualified = '' THEN left(s, 80)
    WHEN tk__kn_templated(s) AND regexp_matches(regexp_extract(qualified, '([^:]+)$', 1),
                                               '^(Kernel2?|kernel|device_kernel|kernel_entry)$')
        THEN left(coalesce(nullif(regexp_extract(qualified, '([^:]+::[^:]+)$', 1), ''),
                           regexp_extract(qualified, '([^:]+)$', 1))
                  || '<' || coalesce('…' || nullif(regexp_extract(s,
                        '([A-Za-z0-9_]*(gemm|conv|fmha|flash|attention|softmax|norm|reduce)[A-Za-z0-9_]*)',
                        1), '') || '…', '…') || '>', 120)
    WHEN tk__kn_templated(s) THEN left(regexp_extract(qualified, '([^:]+)$', 1), 80) || '<…>'
    ELSE left(regexp_extract(qualified, '([^:]+)$', 1), 80)
END;
-- name: tk_kernel_name
-- returns: VARCHAR
-- A short display name for a kernel, a pure function of its full name (the same in every trace): `flash_fwd_kernel<…>`, `cutlass::Kernel2<…gemm…>`.
-- tk_kernel_name(name): a short display name for a kernel, a pure function of its full name,
-- so the same kernel gets the same short name in every trace (diffs match on it):
-- 'void flash_fwd_kernel<Flash_fwd_kernel_traits<...>, ...>(Flash_fwd_params)'
--   -> 'flash_fwd_kernel<…>'; 'void at::native::vectorized_elementwise_kernel<4, ...>(...)'
--   -> 'vectorized_elementwise_kernel<…>'. Generic wrappers (cutlass::Kernel2, device_kernel
-- ...) keep their namespace and the first template word that says what they compute:
--   -> 'cutlass::Kernel2<…cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8…>'.
-- Names without templates or parameters (nsys short names) pass unchanged, cut to 80 characters.
CREATE OR REPLACE TEMP MACRO tk_kernel_name(name) AS
tk__kn_short(tk__kn_clean(name), trim(regexp_extract(tk__kn_clean(name), '^([^<(]*)', 1)));

-- name: tk_kernel_signature
-- returns: VARCHAR
-- The name the category rules' kernel patterns are matched against (no return type, no anonymous namespaces).
-- tk_kernel_signature(name): the name the category rules' kernel patterns are matched
-- against: the demangled name without its return type ('void ', 'std::enable_if<...>::type ')
-- and anonymous namespaces, so a pattern anchored with ^ starts at the kernel's namespace or
-- function name: 'void at::native::(anonymous namespace)::foo<float>(float*)' ->
-- 'at::native::foo<float>(float*)'.
CREATE OR REPLACE TEMP MACRO tk_kernel_signature(name) AS
regexp_replace(regexp_replace(regexp_replace(name, '(\(anonymous namespace\)|<unnamed>)::', '', 'g'),
                              '^std::enable_if<.*?>::type\s+', ''),
               '^(void|int|float|auto)\s+', '');

-- name: tk_copy_direction
-- returns: VARCHAR
-- HtoD, DtoH, DtoD, PtoP, HtoH, other (or memset) for a copy, from its name or args.
-- tk_copy_direction(kind, name, args): 'HtoD', 'DtoH', 'DtoD', 'PtoP', 'HtoH', 'other' for a
-- memcpy row ('memset' for a memset), from its name ('Memcpy HtoD (Pageable -> Device)' in
-- Kineto, '[CUDA memcpy Host-to-Device]' in nsys) or args copyKind (names or the nsys enum:
-- 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP).
CREATE OR REPLACE TEMP MACRO tk_copy_direction(kind, name, args) AS (
    CASE
        WHEN kind = 'memset' THEN 'memset'
        WHEN regexp_matches(name, '(?i)HtoD|Host-to-Device|H2D')
             OR lower(coalesce(args->>'copyKind', args->>'copy_kind', args->>'kind', ''))
                IN ('1', 'htod', 'h2d') THEN 'HtoD'
        WHEN regexp_matches(name, '(?i)DtoH|Device-to-Host|D2H')
             OR lower(coalesce(args->>'copyKind', args->>'copy_kind', args->>'kind', ''))
                IN ('2', 'dtoh', 'd2h') THEN 'DtoH'
        WHEN regexp_matches(name, '(?i)DtoD|Device-to-Device|D2D')
             OR lower(coalesce(args->>'copyKind', args->>'copy_kind', args->>'kind', ''))
                IN ('8', 'dtod', 'd2d') THEN 'DtoD'
        WHEN regexp_matches(name, '(?i)PtoP|Peer-to-Peer|P2P')
             OR lower(coalesce(args->>'copyKind', args->>'copy_kind', args->>'kind', ''))
                IN ('10', 'ptop', 'p2p') THEN 'PtoP'
        WHEN regexp_matches(name, '(?i)HtoH|Host-to-Host')
             OR lower(coalesce(args->>'copyKind', args->>'copy_kind', args->>'kind', ''))
                IN ('htoh', 'h2h') THEN 'HtoH'
        ELSE 'other'
    END
);

-- name: tk_category_rules
-- returns: a table: priority, category, target, pattern
-- The GPU category rules, filled from tracekit/categories.toml and a tracekit.toml's [[category]] tables.
-- tk_category_rules: (priority, category, target, pattern), filled by tracekit from
-- tracekit/categories.toml (plus [[category]] tables of a tracekit.toml, tried first).
CREATE TEMP TABLE IF NOT EXISTS tk_category_rules (
    priority INTEGER, category VARCHAR, target VARCHAR, pattern VARCHAR
);

-- name: tk_rule_matches
-- returns: BOOLEAN
-- Whether the category rule `priority` (its `pattern`, RE2, case-insensitive) matches `text`.
-- tk_rule_matches(text, priority, pattern) -> BOOLEAN: regexp_matches(text, pattern, 'i').
-- tracekit.categories.install redefines it on each DuckDB connection with one CASE branch a
-- rule, its pattern a constant: DuckDB compiles a constant pattern once a query but a pattern
-- read from a row at every row (~40 µs for these patterns), which was most of the time of
-- tk_gpu_activity (names x rules compilations at each call). The same answer either way.
CREATE OR REPLACE TEMP MACRO tk_rule_matches(text, priority, pattern) AS
regexp_matches(text, pattern, 'i');

-- name: tk_gpu_activity
-- returns: one row per kernel/memcpy/memset
-- Every GPU activity of a trace with short_name, device (-1 if none), stream, times, stage, request_id, op (launching host op), direction and its one category.
-- tk_gpu_activity(tid) -> one row per kernel, memcpy and memset of trace `tid`: trace_id,
-- event_id, kind, name, short_name, device (-1 when the source names none), stream, start_ns,
-- end_ns, dur_ns, stage, request_id, op (events.launch_op: the host op that launched it,
-- derived at ingest), direction (memcpy), category. The category is exactly one per
-- activity: 'memcpy <direction>' for copies, 'memset', else the first rule of
-- tk_category_rules whose pattern matches the kernel name (target 'kernel') or its launching
-- op (target 'op'), else 'other'.
CREATE OR REPLACE TEMP MACRO tk_gpu_activity(tid) AS TABLE
WITH graph_launch AS (  -- runtime calls that replay a CUDA/HIP graph
    SELECT event_id FROM events
    WHERE trace_id = tid AND kind = 'runtime' AND name ILIKE '%GraphLaunch%'
), with_op AS (
    SELECT e.trace_id, e.event_id, e.kind, e.name, coalesce(e.device, -1) AS device, e.stream,
           e.start_ns, e.end_ns, e.dur_ns, e.stage, e.request_id, e.launch_op AS op,
           CASE WHEN e.kind = 'memcpy' THEN tk_copy_direction(e.kind, e.name, e.args) END
               AS direction,
           g.event_id IS NOT NULL AS graph_replayed
    FROM events e LEFT JOIN graph_launch g ON g.event_id = e.launch_id
    WHERE e.trace_id = tid AND e.kind IN ('kernel', 'memcpy', 'memset')
), kinds AS (  -- a graph-replayed kernel is classified by its name alone (its op: NULL)
    SELECT DISTINCT name, CASE WHEN NOT graph_replayed THEN op END AS op
    FROM with_op WHERE kind = 'kernel'
), name_hits AS (  -- each rule runs once per distinct kernel name and once per distinct op,
    -- not per (name, op) pair: 2,000 names under 37 ops made 74k pairs x 11 rules
    SELECT n.name, r.category, r.priority
    FROM (SELECT DISTINCT name FROM kinds) n JOIN tk_category_rules r
      ON r.target = 'kernel'
     AND tk_rule_matches(tk_kernel_signature(n.name), r.priority, r.pattern)
), op_hits AS (
    SELECT o.op, r.category, r.priority
    FROM (SELECT DISTINCT op FROM kinds WHERE op IS NOT NULL) o JOIN tk_category_rules r
      ON r.target = 'op' AND tk_rule_matches(o.op, r.priority, r.pattern)
), cat AS (
    SELECT name, op, arg_min(category, priority) AS category
    FROM (SELECT k.name, k.op, h.category, h.priority
          FROM kinds k JOIN name_hits h ON h.name = k.name
          UNION ALL
          SELECT k.name, k.op, h.category, h.priority
          FROM kinds k JOIN op_hits h ON h.op = k.op)
    GROUP BY name, op
), short AS (
    SELECT name, tk_kernel_name(name) AS short_name
    FROM (SELECT DISTINCT name FROM with_op WHERE kind = 'kernel')
)
SELECT w.trace_id, w.event_id, w.kind, w.name,
       coalesce(CASE WHEN w.kind = 'kernel' THEN s.short_name END, w.name) AS short_name,
       w.device, w.stream, w.start_ns, w.end_ns, w.dur_ns, w.stage, w.request_id, w.op,
       w.direction,
       CASE WHEN w.kind = 'memcpy' THEN 'memcpy ' || w.direction
            WHEN w.kind = 'memset' THEN 'memset'
            ELSE coalesce(c.category, 'other') END AS category
FROM with_op w LEFT JOIN cat c ON c.name = w.name
    AND c.op IS NOT DISTINCT FROM (CASE WHEN NOT w.graph_replayed THEN w.op END)
-- (the join on the name alone: a test of w's kind in ON made it a nested-loop join, kernels x
-- distinct names)
LEFT JOIN short s ON s.name = w.name;

-- name: tk_device_names
-- returns: device, device_name
-- The GPU names a trace records (`traces.devices`), 'GPU <n>' where it records none.
-- tk_device_names(tid) -> (device, device_name): the GPU names trace `tid` records
-- (traces.devices), 'GPU <n>' where it records none; -1 is 'GPU (unnamed)'.
CREATE OR REPLACE TEMP MACRO tk_device_names(tid) AS TABLE
WITH d AS (
    SELECT unnest(CAST(devices AS JSON[])) AS d FROM traces WHERE trace_id = tid
)
SELECT TRY_CAST(d->>'id' AS INTEGER) AS device, min(d->>'name') AS device_name
FROM d WHERE TRY_CAST(d->>'id' AS INTEGER) IS NOT NULL GROUP BY 1;

-- name: tk_gpu_ends
-- returns: trace_id, request_id, stage, host_end_ns, gpu_end_ns
-- Per request, and per request and stage (stage NULL: the request), the last host end and the end of the last GPU work launched there: where its GPU-inclusive latency ends.
-- tk_gpu_ends() -> (trace_id, request_id, stage, host_end_ns, gpu_end_ns) over every trace:
-- for each request (stage NULL) and each stage inside a request, the end of its host range
-- (a stage: its last range in the request) and the end of the last kernel/memcpy/memset
-- launched inside it (NULL: none). GPU rows carry the stage and request of the runtime call
-- that launched them (graph-replayed kernels: the graph launch), so a stage's GPU work
-- includes that of the stages nested in it. The one definition of latency (docs/report.md):
-- greatest(host end, gpu end) - start. 'window' requests (a host thread's span, when the trace
-- has no requests) are not units of work: they have no row, so they keep their host time.
CREATE OR REPLACE TEMP MACRO tk_gpu_ends() AS TABLE
WITH par AS (  -- stage nesting, as tk_stage_parents, for every trace
    SELECT trace_id, stage,
           CASE WHEN count(parent_stage) = count(*) THEN mode(parent_stage) END AS parent
    FROM stages GROUP BY trace_id, stage
), chain AS (  -- up to 3 levels up (no recursive CTE: the Spark engine expands this macro)
    SELECT p1.trace_id, p1.stage, p1.parent AS a1, p2.parent AS a2, p3.parent AS a3
    FROM par p1
    LEFT JOIN par p2 ON p2.trace_id = p1.trace_id AND p2.stage = p1.parent
    LEFT JOIN par p3 ON p3.trace_id = p1.trace_id AND p3.stage = p2.parent
), anc AS (  -- each stage and its ancestors: a nested stage's GPU work is its parents' too
    SELECT trace_id, stage, stage AS ancestor FROM chain
    UNION ALL SELECT trace_id, stage, a1 FROM chain WHERE a1 IS NOT NULL
    UNION ALL SELECT trace_id, stage, a2 FROM chain WHERE a2 IS NOT NULL
    UNION ALL SELECT trace_id, stage, a3 FROM chain WHERE a3 IS NOT NULL
), gpu AS (
    SELECT trace_id, request_id, stage, max(end_ns) AS end_ns FROM events
    WHERE kind IN ('kernel', 'memcpy', 'memset') AND request_id IS NOT NULL
    GROUP BY ALL
), host AS (
    SELECT trace_id, request_id, stage, max(end_ns) AS end_ns FROM stages
    WHERE request_id IS NOT NULL GROUP BY ALL
), stage_gpu AS (
    SELECT g.trace_id, g.request_id, a.ancestor AS stage, max(g.end_ns) AS end_ns
    FROM gpu g JOIN anc a ON a.trace_id = g.trace_id AND a.stage = g.stage
    GROUP BY ALL
)
SELECT h.trace_id, h.request_id, h.stage, h.end_ns AS host_end_ns, g.end_ns AS gpu_end_ns
FROM host h LEFT JOIN stage_gpu g USING (trace_id, request_id, stage)
JOIN requests r USING (trace_id, request_id)
WHERE r.source <> 'window'
UNION ALL
SELECT r.trace_id, r.request_id, NULL, r.end_ns, g.end_ns
FROM requests r
LEFT JOIN (SELECT trace_id, request_id, max(end_ns) AS end_ns FROM gpu GROUP BY ALL) g
  USING (trace_id, request_id)
WHERE r.source <> 'window';

-- name: tk_stage_samples
-- returns: trace_id, request_id, stage, dur_ns
-- One sample per request and stage over every trace, with `end_to_end` and `unattributed` (what stage percentiles, diff and check read).
-- tk_stage_samples() -> (trace_id, request_id, stage, dur_ns): one sample per request and
-- stage, over every trace, each a latency that includes the GPU (tk_gpu_ends): a stage's time
-- in a request is the sum of its ranges' durations there plus how long the GPU work launched
-- in it runs past its last range; `end_to_end` is the request's start to the later of its
-- host end and its GPU work's end; `unattributed` the request's host range minus the union of
-- its stage ranges (clipped to the request). Stages outside every request are left out, and
-- so are 'window' requests (a trace's whole span is not a unit of work to compare).
CREATE OR REPLACE TEMP MACRO tk_stage_samples() AS TABLE
WITH req AS (
    SELECT * FROM requests WHERE source <> 'window'
), tail AS (  -- how long each request's / stage's GPU work runs past its host end
    SELECT trace_id, request_id, coalesce(stage, '') AS stage,
           greatest(coalesce(gpu_end_ns, host_end_ns) - host_end_ns, 0) AS tail_ns
    FROM tk_gpu_ends()
), st AS (
    SELECT s.trace_id, s.request_id, s.stage, s.dur_ns,
           greatest(s.start_ns, r.start_ns) AS a, least(s.end_ns, r.end_ns) AS b
    FROM stages s JOIN req r USING (trace_id, request_id)
), iv AS (
    SELECT {'trace_id': trace_id, 'request_id': request_id} AS key, a AS start_ns,
           b AS end_ns
    FROM st
), covered AS (  -- union length of each request's stages
    SELECT key.trace_id AS trace_id, key.request_id AS request_id, union_ns AS covered_ns
    FROM tk_union_ns('iv')
)
SELECT s.trace_id, s.request_id, s.stage, (s.ns + coalesce(t.tail_ns, 0))::BIGINT AS dur_ns
FROM (SELECT trace_id, request_id, stage, sum(dur_ns) AS ns FROM st GROUP BY ALL) s
LEFT JOIN tail t USING (trace_id, request_id, stage)
UNION ALL
SELECT r.trace_id, r.request_id, 'end_to_end', r.dur_ns + coalesce(t.tail_ns, 0)
FROM req r LEFT JOIN tail t ON t.trace_id = r.trace_id AND t.request_id = r.request_id
    AND t.stage = ''
UNION ALL
SELECT r.trace_id, r.request_id, 'unattributed', r.dur_ns - coalesce(c.covered_ns, 0)
FROM req r LEFT JOIN covered c USING (trace_id, request_id);

-- name: tk_stage_parents
-- returns: stage, parent
-- Stage nesting of one trace: the enclosing stage of every range of `stage`, when all of them have one (NULL: top level).
-- tk_stage_parents(trace) -> (stage, parent): stage nesting of one trace. A stage's parent is
-- the most common enclosing stage of its ranges (stages.parent_stage, derived at ingest: the
-- innermost range of another stage on the same thread that contains the range) when every one
-- of them has one, else NULL (a top-level stage).
CREATE OR REPLACE TEMP MACRO tk_stage_parents(trace) AS TABLE
SELECT stage, CASE WHEN count(parent_stage) = count(*) THEN mode(parent_stage) END AS parent
FROM stages WHERE trace_id = trace GROUP BY stage;

-- name: tk_stage_ancestors
-- returns: stage, ancestor, via, lvl
-- Every ancestor of a nested stage; `via` is the ancestor's child on the way down, lvl 1 the parent.
-- tk_stage_ancestors(trace) -> (stage, ancestor, via, lvl): every ancestor of each nested
-- stage (tk_stage_parents), with `via` the ancestor's child on the way down and lvl 1 for the
-- parent; at most 8 levels.
CREATE OR REPLACE TEMP MACRO tk_stage_ancestors(trace) AS TABLE
WITH RECURSIVE parents AS (
    FROM tk_stage_parents(trace)
), anc AS (
    SELECT stage, parent AS ancestor, stage AS via, 1 AS lvl FROM parents WHERE parent IS NOT NULL
    UNION ALL
    SELECT a.stage, p.parent, a.ancestor, a.lvl + 1
    FROM anc a JOIN parents p ON p.stage = a.ancestor
    WHERE p.parent IS NOT NULL AND a.lvl < 8
)
FROM anc;
