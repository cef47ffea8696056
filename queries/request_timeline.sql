-- name: request_timeline
-- returns: the stage ranges of the $slowest slowest requests and of the $typical requests nearest the median, each on its own clock: trace_id, request_id, pick ('slowest' | 'typical'), pick_rank, e2e_ms, stage, start_ms (from the request's start), dur_ms, lane (0 = outermost stage; a stage inside another one lane deeper)
-- param: $trace_id INTEGER trace to read
-- param: $slowest INTEGER slowest requests kept
-- param: $typical INTEGER requests nearest the median end-to-end time kept (the slowest aside)
-- default: $trace_id 1
-- default: $slowest 5
-- default: $typical 3
-- A waterfall of stages per request for the report's timeline: where inside a slow request the
-- time went, beside typical ones. Windows (traces without requests) are left out. A request
-- with no stage gets one row with stage NULL, so it is still drawn (all unattributed).
WITH rq AS (
    SELECT request_id, start_ns, end_ns - start_ns AS dur_ns,
           row_number() OVER (ORDER BY end_ns - start_ns DESC, request_id) AS slow_rank
    FROM requests WHERE trace_id = $trace_id AND source <> 'window'
), med AS (
    SELECT quantile_cont(dur_ns, 0.5) AS m FROM rq
), near AS (
    SELECT r.request_id,
           row_number() OVER (ORDER BY abs(r.dur_ns - med.m), r.request_id) AS near_rank
    FROM rq r CROSS JOIN med WHERE r.slow_rank > $slowest
), picked AS (
    SELECT r.*, CASE WHEN r.slow_rank <= $slowest THEN 'slowest' ELSE 'typical' END AS pick,
           CASE WHEN r.slow_rank <= $slowest THEN r.slow_rank ELSE n.near_rank END AS pick_rank
    FROM rq r LEFT JOIN near n USING (request_id)
    WHERE r.slow_rank <= $slowest OR n.near_rank <= $typical
), st AS (
    SELECT s.* FROM stages s JOIN picked p USING (request_id) WHERE s.trace_id = $trace_id
), laned AS (
    SELECT c.event_id, count(p.event_id) AS lane
    FROM st c LEFT JOIN st p
      ON p.request_id = c.request_id AND p.event_id <> c.event_id
     AND p.start_ns <= c.start_ns AND p.end_ns >= c.end_ns
     AND (p.dur_ns > c.dur_ns OR (p.dur_ns = c.dur_ns AND p.event_id < c.event_id))
    GROUP BY c.event_id
)
SELECT $trace_id::INTEGER AS trace_id, p.request_id, p.pick, p.pick_rank, p.dur_ns / 1e6 AS e2e_ms,
       s.stage, (s.start_ns - p.start_ns) / 1e6 AS start_ms, s.dur_ns / 1e6 AS dur_ms,
       coalesce(l.lane, 0) AS lane
FROM picked p LEFT JOIN st s USING (request_id) LEFT JOIN laned l USING (event_id)
ORDER BY p.pick, p.pick_rank, start_ms, lane, s.stage;  -- slowest first
