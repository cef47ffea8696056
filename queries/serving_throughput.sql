-- name: serving_throughput
-- returns: one row: trace_id, requests (served: a batch names them), batches (that serve one of them), window_ms (first arrival -> last response of those requests), requests_per_s, mean_batch, p50_batch, max_batch, batch_ms_mean (mean batch length), worker_busy (share of the window some batch runs, per worker thread, the busiest one), ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms (NULL without prefill / decode steps), output_tokens, output_tokens_per_s, within_slo (share of the requests within every target given; NULL when none is), goodput_per_s (those requests per second of the window)
-- param: $trace_id INTEGER trace to summarize
-- param: $warmup INTEGER served requests left out as warm-up: the first N by arrival, and with them every batch that served only them
-- param: $slo_ms DOUBLE end-to-end latency target for within_slo and goodput_per_s (0: none)
-- param: $slo_queue_ms DOUBLE queue time target (0: none)
-- param: $slo_ttft_ms DOUBLE time-to-first-token target (0: none)
-- param: $slo_tpot_ms DOUBLE time-per-output-token target (0: none; a request with one token meets it)
-- default: $trace_id 1
-- default: $slo_ms 0
-- default: $slo_queue_ms 0
-- default: $slo_ttft_ms 0
-- default: $slo_tpot_ms 0
-- default: $warmup 0
-- Throughput of a batched server (tracekit.request(id=...), tracekit.batch(ids)): requests/s =
-- served requests / window, the window being their first arrival to their last response.
-- Batch sizes count the ids each batch names. No row values when nothing was served.
-- Queue, TTFT and TPOT per request as in queries/serving_requests.sql (the same definitions,
-- repeated here: queries are single files); percentiles are quantile_cont.
-- Goodput: with targets, the share of served requests within all of them, and those requests
-- per second (`tracekit query serving_throughput RUN --param slo_ms=200`; `tracekit report
-- --slo 'end_to_end.p99<=200ms'`).
WITH warm AS (  -- the first $warmup served requests by arrival (warm-up: left out)
    SELECT request_id FROM (
        SELECT r.request_id, row_number() OVER (ORDER BY r.start_ns, r.request_id) AS k
        FROM requests r
        WHERE r.trace_id = $trace_id
          AND r.request_id IN (SELECT request_id FROM request_batches WHERE trace_id = $trace_id)
    ) WHERE k <= $warmup
), served AS (
    SELECT DISTINCT rb.request_id, rb.batch_id
    FROM request_batches rb
    WHERE rb.trace_id = $trace_id AND rb.request_id IS NOT NULL
      AND rb.request_id NOT IN (SELECT request_id FROM warm)
), rq AS (
    SELECT r.* FROM requests r
    WHERE r.trace_id = $trace_id AND r.request_id IN (SELECT request_id FROM served)
), bt AS (
    SELECT b.* FROM batches b
    WHERE b.trace_id = $trace_id AND b.batch_id IN (SELECT batch_id FROM served)
), steps AS (  -- the batches' prefill and decode steps (not nested in another of them)
    SELECT b.batch_id, s.stage, least(s.end_ns, b.end_ns) AS end_ns
    FROM bt b
    JOIN stages s
      ON s.trace_id = $trace_id AND s.tid = b.tid AND coalesce(s.pid, -1) = coalesce(b.pid, -1)
     AND s.start_ns >= b.start_ns AND s.start_ns < b.end_ns
    WHERE s.stage IN ('prefill', 'decode')
      AND (s.parent_stage IS NULL OR s.parent_stage NOT IN ('prefill', 'decode'))
), gen AS (
    SELECT v.request_id,
           min(st.end_ns) FILTER (WHERE st.stage = 'prefill') AS first_token_ns,
           max(st.end_ns) FILTER (WHERE st.stage = 'decode') AS last_token_ns,
           count(*) FILTER (WHERE st.stage = 'decode') AS decode_steps
    FROM served v JOIN steps st USING (batch_id)
    GROUP BY v.request_id
), per_req AS (
    SELECT r.request_id, r.dur_ns / 1e6 AS e2e_ms,
           greatest(min(b.start_ns) - r.start_ns, 0) / 1e6 AS queue_ms,
           (any_value(g.first_token_ns) - r.start_ns) / 1e6 AS ttft_ms,
           CASE WHEN any_value(g.decode_steps) > 0 AND any_value(g.first_token_ns) IS NOT NULL
                THEN (any_value(g.last_token_ns) - any_value(g.first_token_ns))
                     / any_value(g.decode_steps) / 1e6 END AS tpot_ms,
           CASE WHEN any_value(g.first_token_ns) IS NOT NULL
                THEN 1 + any_value(g.decode_steps) END AS output_tokens
    FROM rq r
    JOIN served v USING (request_id)
    JOIN bt b USING (batch_id)
    LEFT JOIN gen g ON g.request_id = r.request_id
    GROUP BY r.request_id, r.start_ns, r.dur_ns
), judged AS (
    SELECT *,
           (($slo_ms <= 0 OR e2e_ms <= $slo_ms)
            AND ($slo_queue_ms <= 0 OR queue_ms <= $slo_queue_ms)
            AND ($slo_ttft_ms <= 0 OR coalesce(ttft_ms <= $slo_ttft_ms, false))
            AND ($slo_tpot_ms <= 0 OR coalesce(tpot_ms <= $slo_tpot_ms, true))) AS ok
    FROM per_req
), win AS (
    SELECT min(start_ns) AS w0, max(end_ns) AS w1, count(*) AS n FROM rq
), busy_iv AS (
    SELECT {'pid': coalesce(pid, -1), 'tid': tid} AS key, start_ns, end_ns FROM bt
), busy AS (
    SELECT max(union_ns) AS ns FROM tk_union_ns('busy_iv')
), slo AS (
    SELECT $slo_ms > 0 OR $slo_queue_ms > 0 OR $slo_ttft_ms > 0 OR $slo_tpot_ms > 0 AS given
)
SELECT $trace_id AS trace_id, w.n AS requests, (SELECT count(*) FROM bt) AS batches,
       (w.w1 - w.w0) / 1e6 AS window_ms,
       w.n / nullif((w.w1 - w.w0) / 1e9, 0) AS requests_per_s,
       (SELECT avg(size) FROM bt) AS mean_batch,
       (SELECT quantile_cont(size, 0.5) FROM bt) AS p50_batch,
       (SELECT max(size) FROM bt) AS max_batch,
       (SELECT avg(dur_ns) / 1e6 FROM bt) AS batch_ms_mean,
       (SELECT ns FROM busy) / nullif(w.w1 - w.w0, 0) AS worker_busy,
       (SELECT quantile_cont(ttft_ms, 0.5) FROM per_req) AS ttft_p50_ms,
       (SELECT quantile_cont(ttft_ms, 0.99) FROM per_req) AS ttft_p99_ms,
       (SELECT quantile_cont(tpot_ms, 0.5) FROM per_req) AS tpot_p50_ms,
       (SELECT quantile_cont(tpot_ms, 0.99) FROM per_req) AS tpot_p99_ms,
       (SELECT sum(output_tokens) FROM per_req) AS output_tokens,
       (SELECT sum(output_tokens) FROM per_req) / nullif((w.w1 - w.w0) / 1e9, 0)
           AS output_tokens_per_s,
       CASE WHEN (SELECT given FROM slo) THEN
           (SELECT count(*) FILTER (WHERE ok) FROM judged) / nullif(w.n, 0)
       END AS within_slo,
       CASE WHEN (SELECT given FROM slo) THEN
           (SELECT count(*) FILTER (WHERE ok) FROM judged) / nullif((w.w1 - w.w0) / 1e9, 0)
       END AS goodput_per_s
FROM win w
ORDER BY trace_id;
