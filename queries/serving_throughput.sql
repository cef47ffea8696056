-- name: serving_throughput
-- returns: one row: trace_id, requests (served: a batch names them), batches (that serve one of them), window_ms (first arrival -> last response of those requests), requests_per_s, mean_batch, p50_batch, max_batch, batch_ms_mean (mean batch length), worker_busy (share of the window some batch runs, per worker thread, the busiest one), within_slo (share of the requests whose end-to-end time is at most $slo_ms; NULL when $slo_ms <= 0), goodput_per_s (those requests per second of the window)
-- param: $trace_id INTEGER trace to summarize
-- param: $warmup INTEGER served requests left out as warm-up: the first N by arrival, and with them every batch that served only them
-- param: $slo_ms DOUBLE end-to-end latency target for within_slo and goodput_per_s (0: none)
-- default: $trace_id 1
-- default: $slo_ms 0
-- default: $warmup 0
-- Throughput of a batched server (tracekit.request(id=...), tracekit.batch(ids)): requests/s =
-- served requests / window, the window being their first arrival to their last response.
-- Batch sizes count the ids each batch names. No row values when nothing was served.
-- Goodput: with $slo_ms, the share of served requests within that end-to-end target, and
-- those requests per second (`tracekit query serving_throughput RUN --param slo_ms=200`).
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
), win AS (
    SELECT min(start_ns) AS w0, max(end_ns) AS w1, count(*) AS n FROM rq
), busy_iv AS (
    SELECT {'pid': coalesce(pid, -1), 'tid': tid} AS key, start_ns, end_ns FROM bt
), busy AS (
    SELECT max(union_ns) AS ns FROM tk_union_ns('busy_iv')
)
SELECT $trace_id AS trace_id, w.n AS requests, (SELECT count(*) FROM bt) AS batches,
       (w.w1 - w.w0) / 1e6 AS window_ms,
       w.n / nullif((w.w1 - w.w0) / 1e9, 0) AS requests_per_s,
       (SELECT avg(size) FROM bt) AS mean_batch,
       (SELECT quantile_cont(size, 0.5) FROM bt) AS p50_batch,
       (SELECT max(size) FROM bt) AS max_batch,
       (SELECT avg(dur_ns) / 1e6 FROM bt) AS batch_ms_mean,
       (SELECT ns FROM busy) / nullif(w.w1 - w.w0, 0) AS worker_busy,
       CASE WHEN $slo_ms > 0 THEN
           (SELECT count(*) FILTER (WHERE dur_ns <= $slo_ms * 1e6) FROM rq) / nullif(w.n, 0)
       END AS within_slo,
       CASE WHEN $slo_ms > 0 THEN
           (SELECT count(*) FILTER (WHERE dur_ns <= $slo_ms * 1e6) FROM rq)
               / nullif((w.w1 - w.w0) / 1e9, 0)
       END AS goodput_per_s
FROM win w
ORDER BY trace_id;
