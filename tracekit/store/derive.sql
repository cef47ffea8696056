-- Derivation run once per trace after ingest, over a store holding that one trace.
-- Reads the ingested rows from _events_raw (the ingestor's temp staging table, or `events`
-- renamed by derive.py) and writes `events` once, derived.
-- Fills events.parent_id/depth/self_ns (nesting per host thread), launch_id (GPU row -> runtime
-- call, by correlation within the process), stage and request_id (attribution rules of
-- docs/architecture.md), and the stages and requests tables.
-- Input: temp table _stage_rules(stage VARCHAR, pattern VARCHAR) made by tracekit/store/derive.py.
-- derive.py runs its blocks (tracekit/sqlfile.py's grammar) in order; the progress line names
-- each by its name, underscores as spaces.

-- name: nesting
-- 1. Nesting. A sweep over start and end points per thread, in order: at a start point, the
-- starts so far less the ends so far is the depth + 1. Ties: ends before starts; longer events
-- start first; inner events end first; zero-length events end right after they start.
-- (The starts so far are the start's rank among starts, whose order is the sweep's: with the
-- point's position `seq`, starts - ends = 2 * starts - seq. A running sum over the sweep
-- cost 0.08 s for 131k points; the two row numbers 0.033 s.)
CREATE OR REPLACE TEMP TABLE _host AS
SELECT event_id, coalesce(pid, -1) AS pid, tid, start_ns, end_ns, dur_ns
FROM _events_raw
WHERE tid IS NOT NULL AND kind NOT IN ('kernel', 'memcpy', 'memset', 'gpu_range');

CREATE OR REPLACE TEMP TABLE _starts AS
WITH points AS (
    SELECT event_id, pid, tid, start_ns AS t, 1 AS grp, -dur_ns AS k1, event_id AS k2,
           row_number() OVER (PARTITION BY pid, tid ORDER BY start_ns, -dur_ns, event_id)
               AS starts
    FROM _host
    UNION ALL
    SELECT event_id, pid, tid, end_ns, CASE WHEN dur_ns = 0 THEN 2 ELSE 0 END, -start_ns,
           -event_id, NULL
    FROM _host
), swept AS (
    SELECT event_id, pid, tid, starts, row_number() OVER w AS seq
    FROM points
    WINDOW w AS (PARTITION BY pid, tid ORDER BY t, grp, k1, k2)
)
SELECT event_id, pid, tid, seq, (2 * starts - seq - 1)::INTEGER AS depth FROM swept
WHERE starts IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _nest AS
SELECT c.event_id, c.depth, p.event_id AS parent_id
FROM _starts c ASOF LEFT JOIN _starts p
  ON c.pid = p.pid AND c.tid = p.tid AND p.depth = c.depth - 1 AND c.seq > p.seq;

CREATE OR REPLACE TEMP TABLE _children AS
SELECT n.parent_id AS event_id, sum(e.dur_ns) AS child_ns
FROM _nest n JOIN _events_raw e USING (event_id)
WHERE n.parent_id IS NOT NULL
GROUP BY n.parent_id;

-- name: launches
-- 2. Launches: each GPU row to the runtime call with its correlation id in the same process
-- (Kineto GPU rows carry no host pid: the id is unique within the trace there). When a driver
-- call nests inside a runtime call with the same id, the outer (earliest) one launched it.
-- Each kernel, memcpy and memset also gets the host op that launched it (events.launch_op):
-- Kineto's cpu_op with the same External id (the first one), else the parent of the
-- launching runtime call; emit_nvtx's per-call suffixes removed. Once here, not in every GPU
-- query: at 5e6 kernels those joins took 2.1 s per query (bench/results.md, 2026-12-06).
CREATE OR REPLACE TEMP TABLE _launch AS
WITH launched AS (
    SELECT g.event_id, arg_min(r.event_id, r.start_ns) AS launch_id
    FROM _events_raw g
    JOIN _events_raw r
      ON r.kind = 'runtime' AND r.correlation = g.correlation AND (g.pid IS NULL OR g.pid = r.pid)
    WHERE g.tid IS NULL AND g.correlation IS NOT NULL AND g.correlation <> 0
      AND g.kind IN ('kernel', 'memcpy', 'memset', 'sync')
    GROUP BY g.event_id
), activity AS (
    SELECT event_id, external_id FROM _events_raw WHERE kind IN ('kernel', 'memcpy', 'memset')
), ext_op AS (
    SELECT external_id, tk_op_name(arg_min(name, event_id)) AS op FROM _events_raw
    WHERE kind = 'cpu_op' AND external_id IS NOT NULL AND external_id <> 0
      AND external_id IN (SELECT external_id FROM activity)
    GROUP BY external_id
), gpu AS (
    SELECT event_id, l.launch_id, a.external_id, a.event_id IS NOT NULL AS is_activity,
           n.parent_id AS launch_parent
    FROM launched l FULL JOIN activity a USING (event_id)
    LEFT JOIN _nest n ON n.event_id = l.launch_id
), parent_op AS (  -- (the parents are few: their names are read and cut once each)
    SELECT event_id, tk_op_name(name) AS op FROM _events_raw
    WHERE event_id IN (SELECT launch_parent FROM gpu WHERE is_activity)
)
SELECT g.event_id, g.launch_id,
       CASE WHEN g.is_activity THEN coalesce(x.op, p.op) END AS launch_op
FROM gpu g
LEFT JOIN ext_op x ON x.external_id = g.external_id
LEFT JOIN parent_op p ON p.event_id = g.launch_parent;

-- name: stages
-- 3. Stages: tracekit:<stage> ranges, plus user rules (outermost match per thread). Each
-- rule's regex runs once per distinct name, not per event (1e6 Kineto events: 2-3 s -> 0.1 s).
CREATE OR REPLACE TEMP TABLE _rule_hits AS
WITH names AS (
    SELECT DISTINCT name FROM _events_raw
    WHERE kind IN ('range', 'cpu_op', 'python') AND (SELECT count(*) FROM _stage_rules) > 0
), matched AS (
    SELECT n.name, r.stage FROM names n JOIN _stage_rules r ON regexp_matches(n.name, r.pattern)
)
SELECT e.event_id, m.stage, e.start_ns, e.end_ns, e.pid, e.tid
FROM _events_raw e JOIN matched m ON e.name = m.name
WHERE e.kind IN ('range', 'cpu_op', 'python') AND e.tid IS NOT NULL
  AND NOT (e.kind = 'range' AND e.name LIKE 'tracekit:%');

CREATE OR REPLACE TEMP TABLE _stage_ranges AS
SELECT event_id, substr(name, 10) AS stage, start_ns, end_ns, pid, tid, 'annotated' AS source
FROM _events_raw
WHERE kind = 'range' AND name LIKE 'tracekit:%' AND name <> 'tracekit:request'
  AND name NOT LIKE 'tracekit:request[%' AND name NOT LIKE 'tracekit:batch[%'  -- (serving)
  AND tid IS NOT NULL AND length(name) > 9
UNION ALL
-- A hit is dropped when another hit of its stage and thread contains it (the same interval:
-- the later event_id is dropped). In the order start, end descending, event_id, a hit's
-- containers are exactly the rows before it that end at or after it: one window sweep (the
-- NOT EXISTS self-join it replaces was quadratic: 11.7 s at 5e6 nsys kernels, this 0.05 s).
SELECT h.event_id, h.stage, h.start_ns, h.end_ns, h.pid, h.tid, 'rule'
FROM (
    SELECT *, max(end_ns) OVER (
        PARTITION BY stage, pid, tid ORDER BY start_ns, end_ns DESC, event_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_end
    FROM _rule_hits
) h
WHERE h.before_end IS NULL OR h.before_end < h.end_ns;

-- 3b. Serving structures (tracekit/serving_structures.toml, in temp table _structure_rules): a
-- trace with no stage so far takes them from the first structure (lowest rank) that one of
-- its required stages matches. Each pattern runs once per distinct (kind, name). A stage with
-- a `span` becomes one range per enclosing span event, from its first hit to its last; then,
-- as for rules, only the outermost hit of a stage on a thread counts.
CREATE OR REPLACE TEMP TABLE _structure_hits AS
WITH names AS (
    SELECT DISTINCT kind, name FROM _events_raw
    WHERE kind IN ('range', 'cpu_op', 'python') AND tid IS NOT NULL
      AND NOT EXISTS (FROM _stage_ranges) AND EXISTS (FROM _structure_rules)
), matched AS (
    SELECT n.kind, n.name, r.* FROM names n JOIN _structure_rules r
      ON list_contains(r.kinds, n.kind) AND regexp_matches(n.name, r.pattern)
    WHERE r.exclude IS NULL OR NOT regexp_matches(n.name, r.exclude)
), chosen AS (
    SELECT min(rank) AS rank FROM matched WHERE required
)
SELECT e.event_id, m.stage, e.start_ns, e.end_ns, e.pid, e.tid, m.structure, m.span, m.step,
       m.within, TRY_CAST(nullif(regexp_extract(e.name, m.batch, 1), '') AS INTEGER) AS batch_size
FROM _events_raw e JOIN matched m ON e.kind = m.kind AND e.name = m.name
WHERE m.rank = (SELECT rank FROM chosen) AND e.tid IS NOT NULL;

-- Hits of a stage with a `span` or `within` regex, each with the enclosing event of that regex
-- on its thread (the latest started before the hit that still holds it).
CREATE OR REPLACE TEMP TABLE _structure_enclosed AS
WITH wanted AS (
    SELECT DISTINCT coalesce(span, within) AS outer_re FROM _structure_hits
    WHERE coalesce(span, within) IS NOT NULL
), outer_names AS (
    SELECT DISTINCT w.outer_re, e.name FROM (SELECT DISTINCT name FROM _events_raw
                                            WHERE kind IN ('range', 'cpu_op', 'python')) e, wanted w
    WHERE regexp_matches(e.name, w.outer_re)
), outer_ev AS (
    SELECT e.event_id AS outer_id, o.outer_re, coalesce(e.pid, -1) AS pid, e.tid, e.start_ns,
           e.end_ns
    FROM _events_raw e JOIN outer_names o ON e.name = o.name
    WHERE e.kind IN ('range', 'cpu_op', 'python') AND e.tid IS NOT NULL
), hits AS (
    SELECT *, coalesce(span, within) AS outer_re, coalesce(pid, -1) AS k_pid
    FROM _structure_hits WHERE coalesce(span, within) IS NOT NULL
)
SELECT h.* EXCLUDE (outer_re, k_pid), o.outer_id
FROM hits h ASOF JOIN outer_ev o
  ON o.outer_re = h.outer_re AND o.pid = h.k_pid AND o.tid = h.tid AND h.start_ns >= o.start_ns
WHERE h.end_ns <= o.end_ns;

-- a `span` stage: one range per enclosing event, from its first hit to its last
CREATE OR REPLACE TEMP TABLE _structure_spans AS
SELECT min(event_id) AS event_id, stage, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
       any_value(pid) AS pid, tid, any_value(structure) AS structure, any_value(span) AS span,
       any_value(step) AS step, max(batch_size) AS batch_size
FROM _structure_enclosed WHERE span IS NOT NULL
GROUP BY outer_id, stage, tid;

-- "generation" steps: the outermost hits inside each enclosing event (a generate call), in
-- start order: the first is the prefill, the others decode steps
CREATE OR REPLACE TEMP TABLE _structure_gen AS
WITH outermost AS (
    SELECT * FROM (
        SELECT *, max(end_ns) OVER (
            PARTITION BY outer_id ORDER BY start_ns, end_ns DESC, event_id
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_end
        FROM _structure_enclosed WHERE within IS NOT NULL AND step = 'generation'
    ) WHERE before_end IS NULL OR before_end < end_ns
)
SELECT event_id,
       CASE WHEN row_number() OVER (PARTITION BY outer_id ORDER BY start_ns, event_id) = 1
            THEN 'prefill' ELSE 'decode' END AS stage,
       start_ns, end_ns, pid, tid, structure, span,
       CASE WHEN row_number() OVER (PARTITION BY outer_id ORDER BY start_ns, event_id) = 1
            THEN 'prefill' ELSE 'decode' END AS step, batch_size
FROM outermost;

INSERT INTO _stage_ranges
SELECT h.event_id, h.stage, h.start_ns, h.end_ns, h.pid, h.tid, 'inferred:' || h.structure
FROM (
    SELECT *, max(end_ns) OVER (
        PARTITION BY stage, pid, tid ORDER BY start_ns, end_ns DESC, event_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_end
    FROM (SELECT event_id, stage, start_ns, end_ns, pid, tid, structure FROM _structure_hits
          WHERE span IS NULL AND within IS NULL
          UNION ALL BY NAME
          SELECT event_id, stage, start_ns, end_ns, pid, tid, structure FROM _structure_spans
          UNION ALL BY NAME
          SELECT event_id, stage, start_ns, end_ns, pid, tid, structure FROM _structure_gen)
) h
WHERE h.before_end IS NULL OR h.before_end < h.end_ns;

-- engine steps' batch sizes (step[DECODE bs=16]) as attributes of their stage ranges
INSERT INTO attributes
SELECT 1, h.event_id, 'batch_size', h.batch_size::VARCHAR
FROM (SELECT event_id, batch_size FROM _structure_hits WHERE span IS NULL AND within IS NULL
      UNION ALL SELECT event_id, batch_size FROM _structure_spans) h
WHERE h.batch_size IS NOT NULL AND h.event_id IN (SELECT event_id FROM _stage_ranges);

-- name: requests
-- 4. Requests: tracekit:request ranges (tracekit:request[<id>] for served requests, which
-- may overlap); else ProfilerStep#N; else one request per run of stages that starts again each
-- time the first stage name recurs.
CREATE OR REPLACE TEMP TABLE _req_ranges AS
SELECT event_id, start_ns, end_ns, pid, tid, 'tracekit:request' AS source
FROM _events_raw
WHERE kind = 'range' AND (name = 'tracekit:request' OR name LIKE 'tracekit:request[%]')
  AND tid IS NOT NULL;

INSERT INTO _req_ranges
SELECT event_id, start_ns, end_ns, pid, tid, 'ProfilerStep'
FROM _events_raw
WHERE (SELECT count(*) FROM _req_ranges) = 0
  AND kind IN ('range', 'cpu_op') AND tid IS NOT NULL
  AND regexp_full_match(name, 'ProfilerStep#[0-9]+');

-- else the request calls of the serving structure the stages came from (a pipeline's
-- __call__: it runs preprocess once per input), the outermost on each thread
INSERT INTO _req_ranges
WITH pattern AS (
    SELECT any_value(request) AS re FROM _structure_rules
    WHERE structure = (SELECT any_value(structure) FROM _structure_hits)
), names AS (
    SELECT DISTINCT name FROM _events_raw
    WHERE kind IN ('python', 'range') AND tid IS NOT NULL
      AND (SELECT count(*) FROM _req_ranges) = 0 AND (SELECT re FROM pattern) IS NOT NULL
      AND regexp_matches(name, (SELECT re FROM pattern))
), hits AS (
    SELECT e.event_id, e.start_ns, e.end_ns, e.pid, e.tid,
           max(e.end_ns) OVER (PARTITION BY e.pid, e.tid ORDER BY e.start_ns, e.end_ns DESC,
                               e.event_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS before_end
    FROM _events_raw e JOIN names n ON e.name = n.name
    WHERE e.kind IN ('python', 'range') AND e.tid IS NOT NULL
)
SELECT event_id, start_ns, end_ns, pid, tid, 'structure'
FROM hits WHERE before_end IS NULL OR before_end < end_ns;

INSERT INTO _req_ranges
WITH s AS (
    SELECT *, row_number() OVER (ORDER BY start_ns, event_id) AS rn FROM _stage_ranges
), g AS (
    SELECT *, sum(CASE WHEN stage = (SELECT stage FROM s WHERE rn = 1) THEN 1 ELSE 0 END)
                  OVER (ORDER BY start_ns, event_id ROWS UNBOUNDED PRECEDING) AS grp
    FROM s
)
SELECT NULL, min(start_ns), max(end_ns), arg_min(pid, start_ns), arg_min(tid, start_ns),
       'stage-sequence'
FROM g
WHERE (SELECT count(*) FROM _req_ranges) = 0
GROUP BY grp;

-- A trace with neither stages nor requests: the name of the top-level ranges that repeat (at
-- least twice) and cover the most time, when they cover at least half of the trace's span;
-- else the window: one request per host thread that does the work (first to last event of
-- each thread whose top-level ranges/ops/frames take at least 10% of the busiest thread's:
-- the main thread of each rank, not helper threads), or one over the whole trace when it has
-- no host events. (Stages are then inferred under them, step 4b.)
INSERT INTO _req_ranges
WITH span AS (
    SELECT max(end_ns) - min(start_ns) AS ns FROM _events_raw
), top_ranges AS (
    SELECT e.event_id, e.name, e.start_ns, e.end_ns, e.pid, e.tid
    FROM _events_raw e JOIN _nest n USING (event_id)
    WHERE e.kind = 'range' AND e.tid IS NOT NULL AND n.parent_id IS NULL
      AND e.name NOT LIKE 'tracekit:%'
), best AS (
    SELECT name FROM top_ranges GROUP BY name
    HAVING count(*) >= 2 AND sum(end_ns - start_ns) >= 0.5 * (SELECT ns FROM span)
    ORDER BY sum(end_ns - start_ns) DESC, name LIMIT 1
)
SELECT event_id, start_ns, end_ns, pid, tid, 'repeated-range'
FROM top_ranges
WHERE name = (SELECT name FROM best)
  AND (SELECT count(*) FROM _req_ranges) = 0 AND (SELECT count(*) FROM _stage_ranges) = 0;

INSERT INTO _req_ranges
WITH th AS (
    SELECT e.pid, e.tid, min(e.start_ns) AS s, max(e.end_ns) AS e,
           coalesce(sum(e.dur_ns) FILTER (WHERE n.parent_id IS NULL), 0) AS top_ns
    FROM _events_raw e JOIN _nest n USING (event_id)
    WHERE e.kind IN ('range', 'cpu_op', 'python') AND e.tid IS NOT NULL
    GROUP BY e.pid, e.tid
)
SELECT NULL, s, e, pid, tid, 'window'
FROM th
WHERE top_ns > 0 AND top_ns >= 0.1 * (SELECT max(top_ns) FROM th)
  AND (SELECT count(*) FROM _req_ranges) = 0 AND (SELECT count(*) FROM _stage_ranges) = 0;

INSERT INTO _req_ranges
SELECT NULL, min(start_ns), max(end_ns), NULL, NULL, 'window'
FROM _events_raw
WHERE (SELECT count(*) FROM _req_ranges) = 0 AND (SELECT count(*) FROM _stage_ranges) = 0
HAVING count(*) > 0;

DELETE FROM requests;
INSERT INTO requests
SELECT 1, row_number() OVER (ORDER BY start_ns, event_id NULLS LAST), start_ns, end_ns,
       end_ns - start_ns, source, event_id, pid, tid
FROM _req_ranges;

-- name: inferred_stages
-- 4b. A trace with no stage (no tracekit ranges, no --stage rule matched) gets inferred ones,
-- under each request (or anywhere, for a 'window' request), from the first source it has:
--   modules: torch.profiler nn.Module frames ('nn.Module: BertLayer_3' -> stage BertLayer);
--   ranges:  user annotations / NVTX ranges (request ranges and ProfilerStep aside);
--   ops:     cpu_ops.
-- Depth counts within the chosen source on its thread (1 = outermost). --stage-depth N picks
-- it; by default ops take depth 1, modules and ranges the shallowest depth where no one name
-- holds 80% of that depth's time while that depth still covers half of the request time
-- (else the deepest depth that does; else 1): so a model wrapped in one top module (or a run
-- in one `main` range) is split into its parts. Stage names drop emit_nvtx suffixes
-- (tk_op_name). A 'window' request under which nothing was inferred is dropped again: the
-- report then answers with the GPU figures, not "100% unattributed".
CREATE OR REPLACE TEMP TABLE _cand AS
WITH base AS (
    SELECT e.event_id, coalesce(e.pid, -1) AS pid, e.tid, e.start_ns, e.end_ns, e.dur_ns,
           CASE WHEN e.kind = 'python' AND e.name LIKE 'nn.Module: %' THEN 'modules'
                WHEN e.kind = 'range' THEN 'ranges'
                WHEN e.kind = 'cpu_op' THEN 'ops' END AS how,
           CASE WHEN e.kind = 'python'
                THEN regexp_replace(substr(e.name, 12), '_[0-9]+$', '')
                ELSE tk_op_name(e.name) END AS stage
    FROM _events_raw e
    WHERE (SELECT count(*) FROM _stage_ranges) = 0 AND e.tid IS NOT NULL AND e.dur_ns > 0
      AND ((e.kind = 'python' AND e.name LIKE 'nn.Module: %')
           OR (e.kind IN ('range', 'cpu_op') AND e.name NOT LIKE 'tracekit:%'
               AND NOT regexp_full_match(e.name, 'ProfilerStep#[0-9]+')))
      AND e.event_id NOT IN (SELECT event_id FROM _req_ranges WHERE event_id IS NOT NULL)
), req AS (
    SELECT request_id, start_ns, end_ns, coalesce(pid, -1) AS pid, tid FROM requests
), same_thread AS (
    SELECT b.event_id, r.request_id, r.end_ns AS r_end
    FROM base b ASOF JOIN req r ON b.pid = r.pid AND b.tid = r.tid AND b.start_ns >= r.start_ns
), placed AS (  -- the request holding the candidate's start, on its thread first
    SELECT b.*,
           CASE WHEN t.r_end > b.start_ns THEN t.request_id ELSE a.request_id END AS request_id,
           CASE WHEN t.r_end > b.start_ns THEN t.r_end ELSE a.end_ns END AS r_end
    FROM base b LEFT JOIN same_thread t USING (event_id)
    ASOF LEFT JOIN req a ON b.start_ns >= a.start_ns
), chosen AS (
    SELECT min(CASE how WHEN 'modules' THEN 1 WHEN 'ranges' THEN 2 ELSE 3 END) AS k
    FROM placed WHERE request_id IS NOT NULL AND start_ns < r_end
)
SELECT p.* EXCLUDE (r_end)
FROM placed p, chosen c
WHERE p.request_id IS NOT NULL AND p.start_ns < p.r_end
  AND CASE p.how WHEN 'modules' THEN 1 WHEN 'ranges' THEN 2 ELSE 3 END = c.k;

-- depth among the candidates of a thread: the sweep of step 1 over them alone
CREATE OR REPLACE TEMP TABLE _cand_depth AS
WITH points AS (
    SELECT event_id, pid, tid, start_ns AS t, 1 AS grp, -dur_ns AS k1, event_id AS k2, 1 AS delta
    FROM _cand
    UNION ALL
    SELECT event_id, pid, tid, end_ns, 0, -start_ns, -event_id, -1 FROM _cand
), swept AS (
    SELECT event_id, delta,
           sum(delta) OVER (PARTITION BY pid, tid ORDER BY t, grp, k1, k2
                            ROWS UNBOUNDED PRECEDING) AS running
    FROM points
)
SELECT event_id, running::INTEGER AS depth FROM swept WHERE delta = 1;

CREATE OR REPLACE TEMP TABLE _cand_stats AS
WITH c AS (
    SELECT c.*, d.depth FROM _cand c JOIN _cand_depth d USING (event_id)
), per_name AS (
    SELECT depth, stage, sum(dur_ns) AS ns FROM c GROUP BY ALL
), per_depth AS (
    SELECT depth, sum(ns) AS ns, max(ns) AS top_ns FROM per_name GROUP BY depth
)
SELECT d.depth, d.ns / nullif((SELECT sum(dur_ns) FROM requests), 0) AS coverage,
       d.top_ns / nullif(d.ns, 0) AS top_share,
       (SELECT any_value(how) FROM _cand) AS how
FROM per_depth d;

INSERT INTO _stage_ranges
WITH pick AS (
    SELECT coalesce(
        (SELECT depth FROM _infer_opts),
        CASE WHEN (SELECT any_value(how) FROM _cand) = 'ops' THEN 1 END,
        (SELECT min(depth) FROM _cand_stats WHERE top_share < 0.8 AND coverage >= 0.5),
        (SELECT max(depth) FROM _cand_stats WHERE coverage >= 0.5),
        1) AS depth
)
SELECT c.event_id, c.stage, c.start_ns, c.end_ns, nullif(c.pid, -1), c.tid,
       'inferred:' || c.how || ' depth ' || (SELECT depth FROM pick)
FROM _cand c JOIN _cand_depth d USING (event_id)
WHERE d.depth = (SELECT depth FROM pick);

DELETE FROM requests
WHERE source = 'window' AND (SELECT count(*) FROM _stage_ranges) = 0;

-- name: requests_of_stages
-- A stage belongs to the request that contains its start, same thread first.
CREATE OR REPLACE TEMP TABLE _stage_req AS
WITH same_thread AS (
    SELECT s.event_id, r.request_id, r.end_ns AS r_end, s.start_ns
    FROM _stage_ranges s ASOF LEFT JOIN requests r
      ON s.pid IS NOT DISTINCT FROM r.pid AND s.tid = r.tid AND s.start_ns >= r.start_ns
), any_thread AS (
    SELECT s.event_id, r.request_id, r.end_ns AS r_end, s.start_ns
    FROM _stage_ranges s ASOF LEFT JOIN requests r ON s.start_ns >= r.start_ns
)
SELECT a.event_id,
       CASE WHEN a.request_id IS NOT NULL AND a.start_ns < a.r_end THEN a.request_id
            WHEN b.request_id IS NOT NULL AND b.start_ns < b.r_end THEN b.request_id END
           AS request_id
FROM same_thread a JOIN any_thread b USING (event_id);

DELETE FROM stages;
INSERT INTO stages
SELECT 1, q.request_id, s.stage, s.start_ns, s.end_ns, s.end_ns - s.start_ns, s.event_id,
       s.pid, s.tid, s.source, NULL
FROM _stage_ranges s LEFT JOIN _stage_req q USING (event_id);

-- Each stage range's enclosing stage: the innermost range of another stage on the same thread
-- that contains it (tk_stage_parents makes the stage nesting of it). Looked for in the range's
-- own request first, then, for ranges with none there, among the ranges that can hold another
-- request's ranges (those outside every request or ending after their request). Once here:
-- four queries of a report read it, and each took 0.2 s to find it in a 1e6-kernel store.
-- Containment is a range join DuckDB runs as one IE join (n log n): each range's start and
-- end become their rank among all the ranges' end points, offset by its group's number (its
-- thread and request, or its thread) times the count of ranks, so that one range contains
-- another only within its group. (An equi-join on the group, then the containment test,
-- compared every pair of ranges of a request: 27 s for 200k cpu_ops inferred as stages.)
CREATE OR REPLACE TEMP TABLE _stage_keys AS
WITH points AS (
    SELECT start_ns AS t FROM stages UNION SELECT end_ns FROM stages
), ranked AS (
    SELECT t, row_number() OVER (ORDER BY t) AS r, count(*) OVER () + 1 AS n FROM points
), grouped AS (
    SELECT s.event_id, s.stage, s.dur_ns, s.request_id, a.n, a.r AS rs, b.r AS re,
           dense_rank() OVER (ORDER BY s.tid, coalesce(s.pid, -1), coalesce(s.request_id, -1))
               AS in_request,
           dense_rank() OVER (ORDER BY s.tid, coalesce(s.pid, -1)) AS in_thread
    FROM stages s JOIN ranked a ON a.t = s.start_ns JOIN ranked b ON b.t = s.end_ns
    WHERE s.tid IS NOT NULL
)
SELECT event_id, stage, dur_ns, request_id,
       in_request * n + rs AS req_start, in_request * n + re AS req_end,
       in_thread * n + rs AS thr_start, in_thread * n + re AS thr_end
FROM grouped;

-- (Each join its own statement: inside one, DuckDB chose a piecewise merge join on one bound.)
CREATE OR REPLACE TEMP TABLE _stage_near AS
SELECT c.event_id, arg_min(p.stage, p.dur_ns) AS parent
FROM _stage_keys c JOIN _stage_keys p ON p.req_start <= c.req_start AND p.req_end >= c.req_end
WHERE p.stage <> c.stage
  AND (p.dur_ns > c.dur_ns OR (p.dur_ns = c.dur_ns AND p.event_id < c.event_id))
GROUP BY c.event_id;

UPDATE stages SET parent_stage = enc.parent
FROM (
    WITH straddling AS (
        SELECT k.* FROM _stage_keys k JOIN stages s USING (event_id)
        LEFT JOIN requests r ON r.request_id = s.request_id
        WHERE r.request_id IS NULL OR s.end_ns > r.end_ns
    ), lone AS (
        SELECT k.* FROM _stage_keys k ANTI JOIN _stage_near USING (event_id)
    )
    SELECT c.event_id, arg_min(p.stage, p.dur_ns) AS parent
    FROM lone c JOIN straddling p ON p.thr_start <= c.thr_start AND p.thr_end >= c.thr_end
    WHERE p.request_id IS DISTINCT FROM c.request_id AND p.stage <> c.stage
      AND (p.dur_ns > c.dur_ns OR (p.dur_ns = c.dur_ns AND p.event_id < c.event_id))
    GROUP BY c.event_id
    UNION ALL
    SELECT event_id, parent FROM _stage_near
) enc
WHERE stages.event_id = enc.event_id AND enc.parent IS NOT NULL;

-- name: stage_and_request_of_each_event
-- 5. Host events take the innermost open stage/request on their thread - of the ranges that
-- contain the event's start, the one started last (for equal starts, the shorter) - and GPU
-- rows those of the runtime call that launched them (the NVTX "GPU projection"). First the
-- range started last at or before the event's start: when it is still open, it is the answer.
CREATE OR REPLACE TEMP MACRO tk_latest_start(ranges) AS TABLE
SELECT pid, tid, start_ns, min(end_ns) AS end_ns, arg_min(value, (end_ns, -id)) AS value
FROM query_table(ranges) GROUP BY ALL;

CREATE OR REPLACE TEMP VIEW _stage_in AS
SELECT event_id AS id, coalesce(pid, -1) AS pid, tid, start_ns, end_ns, stage AS value
FROM stages WHERE tid IS NOT NULL;
CREATE OR REPLACE TEMP VIEW _req_in AS
SELECT request_id AS id, coalesce(pid, -1) AS pid, tid, start_ns, end_ns, request_id AS value
FROM requests WHERE tid IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _host_attr AS
WITH st AS (
    SELECT h.event_id, h.start_ns, s.end_ns, s.value
    FROM _host h ASOF LEFT JOIN tk_latest_start('_stage_in') s
      ON h.pid = s.pid AND h.tid = s.tid AND h.start_ns >= s.start_ns
), rq AS (
    SELECT h.event_id, h.start_ns, r.end_ns, r.value
    FROM _host h ASOF LEFT JOIN tk_latest_start('_req_in') r
      ON h.pid = r.pid AND h.tid = r.tid AND h.start_ns >= r.start_ns
)
SELECT st.event_id,
       CASE WHEN st.start_ns <= st.end_ns THEN st.value END AS stage,
       CASE WHEN rq.start_ns <= rq.end_ns THEN rq.value END AS request_id
FROM st JOIN rq USING (event_id);

-- When that range had ended, one started before it may still be open (stages nest: an op
-- after `attention` ends, inside `inference`). In (thread, start) order, with `idx` the
-- position, the next candidate before range i is the last range before it that ends after
-- it (`enclosing`: its enclosing range when ranges nest); a range that ended before the event
-- rules out every range between its `enclosing` and itself, so following `enclosing` from
-- the latest-started range reaches the innermost open one, whatever the overlaps. `enclosing`
-- comes from one inequality join on (idx, thread-major end key); built only when some event
-- needs it. tk_ranked's input: a table or view of (id, pid, tid, start_ns, end_ns, value).
CREATE OR REPLACE TEMP MACRO tk_ranked(ranges) AS TABLE
SELECT *, row_number() OVER (ORDER BY pid, tid, start_ns, end_ns DESC, id) AS idx,
       -- thread-major: a range of an earlier thread always has the smaller key
       dense_rank() OVER (ORDER BY pid, tid)::HUGEINT * 18446744073709551616
           + end_ns + 9223372036854775808 AS end_key
FROM query_table(ranges);

CREATE OR REPLACE TEMP VIEW _stage_needed AS
FROM _stage_in WHERE EXISTS (FROM _host_attr WHERE stage IS NULL);
CREATE OR REPLACE TEMP VIEW _req_needed AS
FROM _req_in WHERE EXISTS (FROM _host_attr WHERE request_id IS NULL);
CREATE OR REPLACE TEMP TABLE _stage_enc AS FROM tk_ranked('_stage_needed');
CREATE OR REPLACE TEMP TABLE _req_enc AS FROM tk_ranked('_req_needed');
-- (over tables, not a CTE: over a CTE DuckDB planned a merge join, quadratic here)
CREATE OR REPLACE TEMP MACRO tk_enclosing(ranked) AS TABLE
SELECT i.idx, max(j.idx) AS enclosing
FROM query_table(ranked) i JOIN query_table(ranked) j
  ON j.idx < i.idx AND j.end_key > i.end_key
GROUP BY i.idx;
CREATE OR REPLACE TEMP TABLE _stage_encl AS FROM tk_enclosing('_stage_enc');
CREATE OR REPLACE TEMP TABLE _req_encl AS FROM tk_enclosing('_req_enc');

-- (event_id, value) of the innermost open range for each of `events` (event_id, pid, tid,
-- start_ns): from the latest-started range up its `enclosing` chain to the first still open.
CREATE OR REPLACE TEMP MACRO tk_innermost_open(ranked, enclosing, events) AS TABLE
WITH RECURSIVE walk(event_id, t, idx) AS (
    SELECT h.event_id, h.start_ns, r.idx
    FROM query_table(events) h
    ASOF JOIN (SELECT pid, tid, start_ns, max(idx) AS idx FROM query_table(ranked) GROUP BY ALL) r
      ON h.pid = r.pid AND h.tid = r.tid AND h.start_ns >= r.start_ns
    UNION ALL
    SELECT w.event_id, w.t, x.enclosing
    FROM walk w JOIN query_table(ranked) e ON e.idx = w.idx
    JOIN query_table(enclosing) x ON x.idx = w.idx
    WHERE e.end_ns < w.t
)
SELECT w.event_id, e.value FROM walk w JOIN query_table(ranked) e ON e.idx = w.idx
WHERE e.end_ns >= w.t;

CREATE OR REPLACE TEMP VIEW _stage_unplaced AS
FROM _host WHERE event_id IN (SELECT event_id FROM _host_attr WHERE stage IS NULL)
             AND EXISTS (FROM _stage_enc);
CREATE OR REPLACE TEMP VIEW _req_unplaced AS
FROM _host WHERE event_id IN (SELECT event_id FROM _host_attr WHERE request_id IS NULL)
             AND EXISTS (FROM _req_enc);
UPDATE _host_attr SET stage = o.value
FROM tk_innermost_open('_stage_enc', '_stage_encl', '_stage_unplaced') o
WHERE _host_attr.event_id = o.event_id;
UPDATE _host_attr SET request_id = o.value
FROM tk_innermost_open('_req_enc', '_req_encl', '_req_unplaced') o
WHERE _host_attr.event_id = o.event_id;

-- name: derived_columns
-- 6. One narrow row of derived columns per host event and per GPU row, then one join onto the
-- staged rows. Five joins of the wide rows, ordered by event_id, took 17.6 s for 11.9e6 nsys
-- rows; this table plus one unordered join, 10.3-11.4 s (bench/results.md). `events` is not
-- written in event_id order: nothing relies on it, and sorting the wide rows cost 5 s there.
-- The row stays narrow because the join holds it in memory: host rows' parent_id and GPU
-- rows' launch_id share `link` (depth is NULL on GPU rows), and launch_op travels as an
-- integer into _op_names. With a string per GPU row the 5e6-kernel build outgrew its memory
-- limit and spilled (writing events 12.9 -> 28.0 s).
CREATE OR REPLACE TEMP TABLE _op_names AS
SELECT row_number() OVER (ORDER BY launch_op) AS op_id, launch_op
FROM (SELECT DISTINCT launch_op FROM _launch WHERE launch_op IS NOT NULL);
CREATE OR REPLACE TEMP TABLE _derived AS
SELECT n.event_id, n.parent_id AS link, n.depth,
       greatest(h.dur_ns - coalesce(c.child_ns, 0), 0) AS self_ns, ha.stage, ha.request_id,
       NULL::BIGINT AS op_id
FROM _nest n
JOIN _host h USING (event_id)
JOIN _host_attr ha USING (event_id)
LEFT JOIN _children c USING (event_id)
UNION ALL
SELECT l.event_id, l.launch_id, NULL, NULL, la.stage, la.request_id, o.op_id
FROM _launch l
LEFT JOIN _host_attr la ON la.event_id = l.launch_id
LEFT JOIN _op_names o ON o.launch_op = l.launch_op;

-- name: batches
-- 7. Batches: tracekit:batch[<id>,<id>,...] ranges (tracekit.batch), each serving the
-- requests whose tracekit:request[<id>] range carries one of its ids. A batch's member whose
-- id names no request range keeps request_id NULL; an id that several request ranges carry
-- goes to the one that started last at or before the batch started (else the nearest one).
DELETE FROM batches;
DELETE FROM request_batches;
INSERT INTO batches
SELECT 1, row_number() OVER (ORDER BY start_ns, event_id), start_ns, end_ns, end_ns - start_ns,
       len(string_split(substr(name, 16, length(name) - 16), ',')), pid, tid, event_id
FROM _events_raw
WHERE kind = 'range' AND name LIKE 'tracekit:batch[%]' AND tid IS NOT NULL;

INSERT INTO request_batches
WITH members AS (
    SELECT b.batch_id, b.start_ns, m.request_key, m.position
    FROM batches b JOIN _events_raw e USING (event_id),
         LATERAL (SELECT unnest(string_split(substr(e.name, 16, length(e.name) - 16), ','))
                         AS request_key,
                         generate_subscripts(string_split(substr(e.name, 16,
                                                              length(e.name) - 16), ','), 1)
                         AS position) m
), keyed AS (
    SELECT r.request_id, r.start_ns, substr(e.name, 18, length(e.name) - 18) AS request_key
    FROM requests r JOIN _events_raw e USING (event_id)
    WHERE e.name LIKE 'tracekit:request[%]'
), matched AS (
    SELECT m.batch_id, m.request_key, m.position,
           arg_max(k.request_id, (k.start_ns <= m.start_ns, -abs(m.start_ns - k.start_ns)))
               AS request_id
    FROM members m LEFT JOIN keyed k USING (request_key)
    GROUP BY ALL
)
SELECT 1, batch_id, position, request_key, request_id FROM matched;

-- name: writing_events
-- The commit of this insert checkpoints: it writes the rows to the file once, compressed,
-- where a commit that does not writes them to the WAL first, for the next checkpoint to
-- write again (0.1 s of a 1 s build of a 75k-event trace). Only here: each commit that
-- checkpoints costs a few ms, and the small writes around this one go to the WAL.
-- What the derivation no longer needs goes first: the write's join and checkpoint run
-- within the build's memory limit (0.6x the file for Kineto) beside what is still held.
DROP TABLE _starts; DROP TABLE _nest; DROP TABLE _children; DROP TABLE _launch;
DROP TABLE _host_attr; DROP TABLE _host;
-- Each device's busy islands with the busy time before each (tk_busy_islands).
-- (Before the threshold: its rows go to the WAL, and the events commit checkpoints both.)
CREATE OR REPLACE TEMP VIEW _gpu_iv AS
SELECT coalesce(device, -1) AS key, start_ns, end_ns FROM _events_raw
WHERE kind IN ('kernel', 'memcpy', 'memset');
INSERT INTO gpu_islands
SELECT 1, key, island, start_ns, end_ns, busy_before_ns FROM tk_busy_islands('_gpu_iv');
DROP VIEW _gpu_iv;
SET checkpoint_threshold = '0b';
INSERT INTO events
SELECT e.trace_id, e.event_id, e.kind, e.name, e.start_ns, e.end_ns, e.dur_ns, e.pid, e.tid,
       e.device, e.stream, e.correlation, e.external_id, e.args,
       CASE WHEN d.depth IS NOT NULL THEN d.link END, d.depth, d.self_ns,
       CASE WHEN d.depth IS NULL THEN d.link END, d.stage, d.request_id, o.launch_op
FROM _events_raw e LEFT JOIN _derived d USING (event_id)
LEFT JOIN _op_names o ON o.op_id = d.op_id;
RESET checkpoint_threshold;

DROP TABLE _events_raw;
