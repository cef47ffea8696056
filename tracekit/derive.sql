-- Derivation run once per trace after ingest, over a store holding that one trace.
-- Reads the ingested rows from _events_raw (the ingestor's temp staging table, or `events`
-- renamed by derive.py) and writes `events` once, derived.
-- Fills events.parent_id/depth/self_ns (nesting per host thread), launch_id (GPU row -> runtime
-- call, by correlation within the process), stage and request_id (attribution rules of
-- docs/architecture.md), and the stages and requests tables.
-- Input: temp table _stage_rules(stage VARCHAR, pattern VARCHAR) made by tracekit/derive.py.
-- derive.py runs it step by step, at the `-- @step <what>` lines (the progress line names them).

-- @step nesting
-- 1. Nesting. A sweep over start (+1) and end (-1) points per thread: the running sum at a start
-- point is the depth + 1. Ties: ends before starts; longer events start first; inner events end
-- first; zero-length events end right after they start.
CREATE OR REPLACE TEMP TABLE _host AS
SELECT event_id, coalesce(pid, -1) AS pid, tid, start_ns, end_ns, dur_ns
FROM _events_raw
WHERE tid IS NOT NULL AND kind NOT IN ('kernel', 'memcpy', 'memset', 'gpu_range');

CREATE OR REPLACE TEMP TABLE _starts AS
WITH points AS (
    SELECT event_id, pid, tid, start_ns AS t, 1 AS grp, -dur_ns AS k1, event_id AS k2, 1 AS delta
    FROM _host
    UNION ALL
    SELECT event_id, pid, tid, end_ns, CASE WHEN dur_ns = 0 THEN 2 ELSE 0 END, -start_ns,
           -event_id, -1
    FROM _host
), swept AS (
    SELECT event_id, pid, tid, delta,
           row_number() OVER w AS seq,
           sum(delta) OVER (w ROWS UNBOUNDED PRECEDING) AS running
    FROM points
    WINDOW w AS (PARTITION BY pid, tid ORDER BY t, grp, k1, k2)
)
SELECT event_id, pid, tid, seq, (running - 1)::INTEGER AS depth FROM swept WHERE delta = 1;

CREATE OR REPLACE TEMP TABLE _nest AS
SELECT c.event_id, c.depth, p.event_id AS parent_id
FROM _starts c ASOF LEFT JOIN _starts p
  ON c.pid = p.pid AND c.tid = p.tid AND p.depth = c.depth - 1 AND c.seq > p.seq;

CREATE OR REPLACE TEMP TABLE _children AS
SELECT n.parent_id AS event_id, sum(e.dur_ns) AS child_ns
FROM _nest n JOIN _events_raw e USING (event_id)
WHERE n.parent_id IS NOT NULL
GROUP BY n.parent_id;

-- @step launches
-- 2. Launches: each GPU row to the runtime call with its correlation id in the same process
-- (Kineto GPU rows carry no host pid: the id is unique within the trace there). When a driver
-- call nests inside a runtime call with the same id, the outer (earliest) one launched it.
CREATE OR REPLACE TEMP TABLE _launch AS
SELECT g.event_id, arg_min(r.event_id, r.start_ns) AS launch_id
FROM _events_raw g
JOIN _events_raw r
  ON r.kind = 'runtime' AND r.correlation = g.correlation AND (g.pid IS NULL OR g.pid = r.pid)
WHERE g.tid IS NULL AND g.correlation IS NOT NULL AND g.correlation <> 0
  AND g.kind IN ('kernel', 'memcpy', 'memset', 'sync')
GROUP BY g.event_id;

-- @step stages
-- 3. Stages: tracekit:<stage> ranges, plus user rules (outermost match per thread).
CREATE OR REPLACE TEMP TABLE _rule_hits AS
SELECT e.event_id, r.stage, e.start_ns, e.end_ns, e.pid, e.tid
FROM _events_raw e JOIN _stage_rules r ON regexp_matches(e.name, r.pattern)
WHERE e.kind IN ('range', 'cpu_op', 'python') AND e.tid IS NOT NULL
  AND NOT (e.kind = 'range' AND e.name LIKE 'tracekit:%');

CREATE OR REPLACE TEMP TABLE _stage_ranges AS
SELECT event_id, substr(name, 10) AS stage, start_ns, end_ns, pid, tid
FROM _events_raw
WHERE kind = 'range' AND name LIKE 'tracekit:%' AND name <> 'tracekit:request'
  AND tid IS NOT NULL AND length(name) > 9
UNION ALL
SELECT h.event_id, h.stage, h.start_ns, h.end_ns, h.pid, h.tid
FROM _rule_hits h
WHERE NOT EXISTS (
    SELECT 1 FROM _rule_hits o
    WHERE o.stage = h.stage AND o.tid = h.tid AND o.pid IS NOT DISTINCT FROM h.pid
      AND o.event_id <> h.event_id AND o.start_ns <= h.start_ns AND o.end_ns >= h.end_ns
      AND (o.start_ns < h.start_ns OR o.end_ns > h.end_ns OR o.event_id < h.event_id)
);

-- @step requests
-- 4. Requests: tracekit:request ranges; else ProfilerStep#N; else one request per run of
-- stages that starts again each time the first stage name recurs.
CREATE OR REPLACE TEMP TABLE _req_ranges AS
SELECT event_id, start_ns, end_ns, pid, tid, 'tracekit:request' AS source
FROM _events_raw WHERE kind = 'range' AND name = 'tracekit:request' AND tid IS NOT NULL;

INSERT INTO _req_ranges
SELECT event_id, start_ns, end_ns, pid, tid, 'ProfilerStep'
FROM _events_raw
WHERE (SELECT count(*) FROM _req_ranges) = 0
  AND kind IN ('range', 'cpu_op') AND tid IS NOT NULL
  AND regexp_full_match(name, 'ProfilerStep#[0-9]+');

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

DELETE FROM requests;
INSERT INTO requests
SELECT 1, row_number() OVER (ORDER BY start_ns, event_id NULLS LAST), start_ns, end_ns,
       end_ns - start_ns, source, event_id, pid, tid
FROM _req_ranges;

-- @step requests of stages
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
       s.pid, s.tid
FROM _stage_ranges s LEFT JOIN _stage_req q USING (event_id);

-- @step stage and request of each event
-- 5. Host events take the innermost open stage/request on their thread; GPU rows take those
-- of the runtime call that launched them (the NVTX "GPU projection"). First the latest-started
-- range before the event: when it is still open, it is the innermost (and the answer for ranges
-- that overlap without nesting, as NVTX start/end ranges can).
CREATE OR REPLACE TEMP TABLE _host_attr AS
WITH st AS (
    SELECT h.event_id, s.stage, s.end_ns AS s_end, h.start_ns
    FROM _host h ASOF LEFT JOIN (SELECT coalesce(pid, -1) AS pid, tid, start_ns, end_ns, stage
                                  FROM stages) s
      ON h.pid = s.pid AND h.tid = s.tid AND h.start_ns >= s.start_ns
), rq AS (
    SELECT h.event_id, r.request_id, r.end_ns AS r_end, h.start_ns
    FROM _host h ASOF LEFT JOIN (SELECT coalesce(pid, -1) AS pid, tid, start_ns, end_ns,
                                        request_id FROM requests) r
      ON h.pid = r.pid AND h.tid = r.tid AND h.start_ns >= r.start_ns
)
SELECT st.event_id,
       CASE WHEN st.start_ns <= st.s_end THEN st.stage END AS stage,
       CASE WHEN rq.start_ns <= rq.r_end THEN rq.request_id END AS request_id
FROM st JOIN rq USING (event_id);

-- When that range had ended, a range around it may still be open (stages nest: an op after
-- `attention` ends, inside `inference`). The innermost range open at each instant of a thread,
-- as a timeline of points (pid, tid, t, value), each holding until the thread's next point:
-- a sweep, as in step 1, gives each range its depth and parent; a range's start makes it the
-- innermost, and one ns after its end its parent is again (if still open; else the nearest of
-- two more ancestors that is: ranges that overlap inside another one). Ties at an instant:
-- ends before starts, outer ends last, inner starts last. Input: a table or view of (id, pid,
-- tid, start_ns, end_ns, value), pid not NULL. Built only when some event needs it.
CREATE OR REPLACE TEMP MACRO tk_innermost_timeline(ranges) AS TABLE
WITH r AS (SELECT * FROM query_table(ranges)),
points AS (
    SELECT id, pid, tid, start_ns AS t, 1 AS grp, start_ns - end_ns AS k1, id AS k2, 1 AS delta
    FROM r
    UNION ALL
    SELECT id, pid, tid, end_ns, CASE WHEN end_ns = start_ns THEN 2 ELSE 0 END, -start_ns, -id,
           -1
    FROM r
), swept AS (
    SELECT id, pid, tid, delta, row_number() OVER w AS seq,
           sum(delta) OVER (w ROWS UNBOUNDED PRECEDING) AS running
    FROM points
    WINDOW w AS (PARTITION BY pid, tid ORDER BY t, grp, k1, k2)
), opened AS (
    SELECT id, pid, tid, seq, (running - 1)::INTEGER AS depth FROM swept WHERE delta = 1
), nested AS (
    SELECT c.id, c.depth, p.id AS parent
    FROM opened c ASOF LEFT JOIN opened p
      ON c.pid = p.pid AND c.tid = p.tid AND p.depth = c.depth - 1 AND c.seq > p.seq
), timeline AS (
    SELECT r.pid, r.tid, r.start_ns AS t, 1 AS kind, n.depth AS ord, r.value
    FROM r JOIN nested n USING (id)
    UNION ALL
    SELECT r.pid, r.tid, r.end_ns + 1, 0, -n.depth,
           CASE WHEN p1.end_ns > r.end_ns THEN p1.value
                WHEN p2.end_ns > r.end_ns THEN p2.value
                WHEN p3.end_ns > r.end_ns THEN p3.value END
    FROM r JOIN nested n USING (id)
    LEFT JOIN r p1 ON p1.id = n.parent
    LEFT JOIN nested n1 ON n1.id = n.parent LEFT JOIN r p2 ON p2.id = n1.parent
    LEFT JOIN nested n2 ON n2.id = n1.parent LEFT JOIN r p3 ON p3.id = n2.parent
)
SELECT pid, tid, t, arg_max_null(value, (kind, ord)) AS value FROM timeline GROUP BY ALL;

CREATE OR REPLACE TEMP VIEW _stage_in AS
SELECT event_id AS id, coalesce(pid, -1) AS pid, tid, start_ns, end_ns, stage AS value
FROM stages WHERE tid IS NOT NULL AND EXISTS (FROM _host_attr WHERE stage IS NULL);
CREATE OR REPLACE TEMP VIEW _req_in AS
SELECT request_id AS id, coalesce(pid, -1) AS pid, tid, start_ns, end_ns, request_id AS value
FROM requests WHERE tid IS NOT NULL AND EXISTS (FROM _host_attr WHERE request_id IS NULL);
CREATE OR REPLACE TEMP TABLE _stage_tl AS FROM tk_innermost_timeline('_stage_in');
CREATE OR REPLACE TEMP TABLE _req_tl AS FROM tk_innermost_timeline('_req_in');

UPDATE _host_attr SET stage = o.stage
FROM (
    SELECT h.event_id, s.value AS stage
    FROM (FROM _host WHERE event_id IN (SELECT event_id FROM _host_attr WHERE stage IS NULL)
                       AND EXISTS (FROM _stage_tl)) h
    ASOF JOIN _stage_tl s ON h.pid = s.pid AND h.tid = s.tid AND h.start_ns >= s.t
) o
WHERE _host_attr.event_id = o.event_id AND o.stage IS NOT NULL;
UPDATE _host_attr SET request_id = o.request_id
FROM (
    SELECT h.event_id, r.value AS request_id
    FROM (FROM _host WHERE event_id IN (SELECT event_id FROM _host_attr WHERE request_id IS NULL)
                       AND EXISTS (FROM _req_tl)) h
    ASOF JOIN _req_tl r ON h.pid = r.pid AND h.tid = r.tid AND h.start_ns >= r.t
) o
WHERE _host_attr.event_id = o.event_id AND o.request_id IS NOT NULL;

-- @step derived columns
-- 6. One narrow row of derived columns per host event and per launched GPU row, then one join
-- onto the staged rows. Five joins of the wide rows, ordered by event_id, took 17.6 s for 11.9e6
-- nsys rows; this table plus one unordered join, 10.3-11.4 s (bench/results.md). `events` is not
-- written in event_id order: nothing relies on it, and sorting the wide rows cost 5 s there.
CREATE OR REPLACE TEMP TABLE _derived AS
SELECT n.event_id, n.parent_id, n.depth,
       greatest(h.dur_ns - coalesce(c.child_ns, 0), 0) AS self_ns, NULL::BIGINT AS launch_id,
       ha.stage, ha.request_id
FROM _nest n
JOIN _host h USING (event_id)
JOIN _host_attr ha USING (event_id)
LEFT JOIN _children c USING (event_id)
UNION ALL
SELECT l.event_id, NULL, NULL, NULL, l.launch_id, la.stage, la.request_id
FROM _launch l LEFT JOIN _host_attr la ON la.event_id = l.launch_id;

-- @step writing events
INSERT INTO events
SELECT e.trace_id, e.event_id, e.kind, e.name, e.start_ns, e.end_ns, e.dur_ns, e.pid, e.tid,
       e.device, e.stream, e.correlation, e.external_id, e.args,
       d.parent_id, d.depth, d.self_ns, d.launch_id, d.stage, d.request_id
FROM _events_raw e LEFT JOIN _derived d USING (event_id);

DROP TABLE _events_raw;
