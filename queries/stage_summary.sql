-- name: stage_summary
-- returns: one row per stage, then 'unattributed', then 'end_to_end': trace_id, row_kind ('stage' | 'unattributed' | 'end_to_end'), stage, source (where the stage came from: annotated, rule, inferred:<how> depth N), count, instances, total_ms, mean_ms, p50_ms, p90_ms, p99_ms, max_ms (latencies that include the GPU), host_ms, gpu_tail_ms, share, gpu_busy_ms, gpu_span_ms, gpu_events, parent, share_of_parent
-- param: $trace_id INTEGER trace to summarize
-- default: $trace_id 1
-- Latency per stage, with statistics across requests of each request's stage total (a stage
-- outside every request counts as its own unit). Latency includes the GPU (tk_gpu_ends, the
-- one definition): a request runs from its start to the later of its host end and the end of
-- the GPU work it launched; a stage in a request is the sum of its ranges plus how long its
-- GPU work runs past its last range (a stage outside every request: its host time). host_ms =
-- the host ranges' total, gpu_tail_ms = total_ms - host_ms. Percentiles are quantile_cont
-- (linear interpolation). share = host_ms / the requests' host time (sum of request
-- durations; the trace span when there are no requests): the split of host time, so the
-- shares of top-level stages and unattributed sum to 100% (GPU tails overlap later stages). 'unattributed' = request time no stage covers (request duration
-- minus the union of its stages' intervals, clipped to the request). GPU time projected onto
-- a stage: busy = per device the length of the union of the intervals of kernels/memcpys/memsets
-- attributed to the stage (streams overlap: never a plain sum), summed over devices; span =
-- first GPU start to last GPU end. (Zero-length GPU rows count in gpu_events only.)
-- Nested stages (tokenize inside preprocess): parent = the stage whose ranges enclose every
-- range of this one (innermost, same thread); NULL for a top-level stage. Shares of the
-- top-level stages and unattributed sum to 100%; a child's share_of_parent = its total / the
-- parent's. Children are listed right after their parent.
WITH st AS (
    SELECT * FROM stages WHERE trace_id = $trace_id
), rq AS (
    SELECT * FROM requests WHERE trace_id = $trace_id
), parents AS (  -- stage nesting (tracekit/macros.sql)
    FROM tk_stage_parents($trace_id)
), tails AS (  -- GPU work past the host end, per request (stage '') and stage (tk_gpu_ends)
    SELECT request_id, coalesce(stage, '') AS stage,
           greatest(coalesce(gpu_end_ns, host_end_ns) - host_end_ns, 0) AS tail_ns
    FROM tk_gpu_ends() WHERE trace_id = $trace_id
), host_unit AS (
    SELECT stage, request_id, coalesce(request_id, -event_id) AS unit, sum(dur_ns) AS host_ns,
           count(*) AS n, min(start_ns) AS first_start, min(source) AS source
    FROM st GROUP BY stage, request_id, coalesce(request_id, -event_id)
), per_unit AS (
    SELECT u.*, u.host_ns + coalesce(t.tail_ns, 0) AS ns
    FROM host_unit u LEFT JOIN tails t ON t.request_id = u.request_id AND t.stage = u.stage
), req_lat AS (
    SELECT r.dur_ns AS host_ns, r.dur_ns + coalesce(t.tail_ns, 0) AS ns
    FROM rq r LEFT JOIN tails t ON t.request_id = r.request_id AND t.stage = ''
), e2e AS (
    SELECT coalesce((SELECT sum(dur_ns) FROM rq),
                    (SELECT duration_ns FROM traces WHERE trace_id = $trace_id))::DOUBLE AS ns
), clipped AS (  -- stage intervals clipped to their request, for the union per request
    SELECT s.request_id, greatest(s.start_ns, r.start_ns) AS s0, least(s.end_ns, r.end_ns) AS s1
    FROM st s JOIN rq r USING (request_id)
    WHERE least(s.end_ns, r.end_ns) > greatest(s.start_ns, r.start_ns)
), stage_iv AS (
    SELECT request_id AS key, s0 AS start_ns, s1 AS end_ns FROM clipped
), covered AS (  -- union length of the request's stages (tk_union_ns)
    SELECT key AS request_id, union_ns AS ns FROM tk_union_ns('stage_iv')
), unattributed AS (
    SELECT r.request_id AS unit, r.dur_ns - coalesce(c.ns, 0) AS ns
    FROM rq r LEFT JOIN covered c USING (request_id)
), gpu AS (
    SELECT {'stage': stage, 'device': coalesce(device, -1)} AS key, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset') AND stage IS NOT NULL
), gpu_stage AS (  -- per device the union length (tk_union_ns), summed over devices
    SELECT key.stage AS stage, sum(union_ns) AS busy_ns, min(first_ns) AS first_ns,
           max(last_ns) AS last_ns, sum(n) AS n
    FROM tk_union_ns('gpu') GROUP BY 1
), rows_ AS (
    SELECT 'stage' AS row_kind, 0 AS kind_order, stage, min(source) AS source,
           min(first_start) AS first_start,
           count(*) AS count, sum(n) AS instances, sum(ns) AS total_ns, avg(ns) AS mean_ns,
           quantile_cont(ns, 0.5) AS p50, quantile_cont(ns, 0.9) AS p90,
           quantile_cont(ns, 0.99) AS p99, max(ns) AS max_ns, sum(host_ns) AS host_ns
    FROM per_unit GROUP BY stage
    UNION ALL
    SELECT 'unattributed', 1, 'unattributed', NULL, NULL, count(*), count(*), sum(ns), avg(ns),
           quantile_cont(ns, 0.5), quantile_cont(ns, 0.9), quantile_cont(ns, 0.99), max(ns),
           sum(ns)
    FROM unattributed HAVING count(*) > 0
    UNION ALL
    SELECT 'end_to_end', 2, 'end_to_end', NULL, NULL, count(*), count(*), sum(ns), avg(ns),
           quantile_cont(ns, 0.5), quantile_cont(ns, 0.9), quantile_cont(ns, 0.99), max(ns),
           sum(host_ns)
    FROM req_lat HAVING count(*) > 0
)
SELECT $trace_id::INTEGER AS trace_id, r.row_kind, r.stage, r.source, r.count::BIGINT AS count,
       r.instances::BIGINT AS instances,
       r.total_ns / 1e6 AS total_ms, r.mean_ns / 1e6 AS mean_ms, r.p50 / 1e6 AS p50_ms,
       r.p90 / 1e6 AS p90_ms, r.p99 / 1e6 AS p99_ms, r.max_ns / 1e6 AS max_ms,
       r.host_ns / 1e6 AS host_ms, (r.total_ns - r.host_ns) / 1e6 AS gpu_tail_ms,
       CASE WHEN e2e.ns > 0 THEN r.host_ns / e2e.ns END AS share,
       CASE WHEN r.row_kind = 'stage' THEN coalesce(g.busy_ns, 0) / 1e6 END AS gpu_busy_ms,
       CASE WHEN r.row_kind = 'stage' THEN coalesce(g.last_ns - g.first_ns, 0) / 1e6 END
           AS gpu_span_ms,
       CASE WHEN r.row_kind = 'stage' THEN coalesce(g.n, 0)::BIGINT END AS gpu_events,
       pa.parent,
       CASE WHEN pr.host_ns > 0 THEN r.host_ns / pr.host_ns END AS share_of_parent
FROM rows_ r CROSS JOIN e2e
LEFT JOIN gpu_stage g ON r.row_kind = 'stage' AND g.stage = r.stage
LEFT JOIN parents pa ON r.row_kind = 'stage' AND pa.stage = r.stage
LEFT JOIN rows_ pr ON pr.row_kind = 'stage' AND pr.stage = pa.parent
ORDER BY r.kind_order, coalesce(pr.first_start, r.first_start) NULLS LAST,
         coalesce(pa.parent, r.stage), pa.parent NULLS FIRST, r.first_start, r.stage;
