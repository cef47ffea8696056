-- name: serving_requests
-- returns: one row per served request (one that a batch names), in arrival order: trace_id, request_id, request_key, arrival_ms (from the trace start), batches, batch_id (its first batch), batch_size (of that batch), queue_ms, in_batch_ms, between_batches_ms, hand_back_ms, end_to_end_ms, batch_other_ms, stages_json (JSON object stage -> ms of its batches' stages, in pipeline order), ttft_ms, tpot_ms, output_tokens (NULL without a prefill step)
-- param: $trace_id INTEGER trace to break down
-- param: $warmup INTEGER served requests left out as warm-up: the first N by arrival, and with them every batch that served only them
-- default: $trace_id 1
-- default: $warmup 0
-- A served request's waterfall (tracekit.request(id=...) and tracekit.batch(ids), tables
-- batches and request_batches): queue = arrival (its request range's start) -> its first batch
-- starts; then its batches (each a range on the worker's thread whose stages belong to each of
-- its requests; in_batch_ms = their summed lengths, of which the stages in stages_json and
-- batch_other_ms the batch time no top-level stage covers); between_batches_ms = time after its
-- first batch and before its last one that no batch of it covers; hand_back = its last batch
-- ends -> its response (the request range's end). queue + in_batch + between + hand_back =
-- end_to_end (negative parts are clipped to 0: a batch that starts before the request arrives
-- or ends after it answered). A stage belongs to a batch when it starts inside it on the
-- batch's thread; a stage nested in another of the same batch counts inside its parent only.
-- Generation (stages named prefill and decode in its batches, e.g. `--stage
-- prefill=srv:Server.prefill --stage decode=srv:Server.decode_step`): the first token is out
-- when the batch's prefill step ends; ttft = arrival -> then; output_tokens = 1 + decode steps;
-- tpot = (its last decode step ends - first token) / (output_tokens - 1). Every request of a
-- batch gets all of the batch's tokens (examples/batch_server.py's clock uses the same rules).
WITH warm AS (  -- the first $warmup served requests by arrival (warm-up: left out)
    SELECT request_id FROM (
        SELECT r.request_id, row_number() OVER (ORDER BY r.start_ns, r.request_id) AS k
        FROM requests r
        WHERE r.trace_id = $trace_id
          AND r.request_id IN (SELECT request_id FROM request_batches WHERE trace_id = $trace_id)
    ) WHERE k <= $warmup
), served AS (
    SELECT DISTINCT rb.request_id, rb.request_key, b.batch_id, b.size, b.start_ns, b.end_ns,
           coalesce(b.pid, -1) AS pid, b.tid
    FROM request_batches rb JOIN batches b USING (trace_id, batch_id)
    WHERE rb.trace_id = $trace_id AND rb.request_id IS NOT NULL
      AND rb.request_id NOT IN (SELECT request_id FROM warm)
), in_batch AS (  -- each batch's stages (a batch once, not once per member)
    SELECT b.batch_id, b.start_ns AS b0, b.end_ns AS b1, s.event_id, s.stage, s.parent_stage,
           s.start_ns, least(s.end_ns, b.end_ns) - s.start_ns AS ns
    FROM batches b
    JOIN stages s
      ON s.tid = b.tid AND coalesce(s.pid, -1) = coalesce(b.pid, -1)
     AND s.start_ns >= b.start_ns AND s.start_ns < b.end_ns
    WHERE b.trace_id = $trace_id AND s.trace_id = $trace_id
), top_stages AS (  -- those not nested in another stage of the same batch
    SELECT i.* FROM in_batch i
    WHERE i.parent_stage IS NULL
       OR NOT EXISTS (SELECT 1 FROM in_batch p
                      WHERE p.batch_id = i.batch_id AND p.stage = i.parent_stage
                        AND p.start_ns <= i.start_ns AND p.event_id <> i.event_id)
), batch_stage AS (
    SELECT batch_id, stage, sum(ns) AS ns, min(start_ns) AS first_ns
    FROM top_stages GROUP BY ALL
), per_req_stage AS (
    SELECT v.request_id, bs.stage, sum(bs.ns) AS ns, min(bs.first_ns) AS first_ns
    FROM served v JOIN batch_stage bs USING (batch_id)
    GROUP BY ALL
), stage_obj AS (
    SELECT request_id, sum(ns) AS staged_ns,
           '{' || string_agg(to_json(stage)::VARCHAR || ':' || to_json(ns / 1e6)::VARCHAR, ','
                             ORDER BY first_ns, stage) || '}' AS stages_json
    FROM per_req_stage GROUP BY request_id
), per_req AS (
    SELECT request_id, any_value(request_key) AS request_key, count(*) AS batches,
           arg_min(batch_id, (start_ns, batch_id)) AS batch_id,
           arg_min(size, (start_ns, batch_id)) AS batch_size,
           min(start_ns) AS b0, max(end_ns) AS b1, sum(end_ns - start_ns) AS in_batch_ns
    FROM served GROUP BY request_id
), gen AS (  -- generation: the prefill and decode steps of its batches (not nested in another)
    SELECT v.request_id,
           min(i.start_ns + i.ns) FILTER (WHERE i.stage = 'prefill') AS first_token_ns,
           max(i.start_ns + i.ns) FILTER (WHERE i.stage = 'decode') AS last_token_ns,
           count(*) FILTER (WHERE i.stage = 'decode') AS decode_steps
    FROM served v JOIN in_batch i USING (batch_id)
    WHERE i.stage IN ('prefill', 'decode')
      AND (i.parent_stage IS NULL OR i.parent_stage NOT IN ('prefill', 'decode'))
    GROUP BY v.request_id
), t0 AS (
    SELECT start_ns FROM traces WHERE trace_id = $trace_id
)
SELECT $trace_id AS trace_id, r.request_id, p.request_key,
       (r.start_ns - (SELECT start_ns FROM t0)) / 1e6 AS arrival_ms,
       p.batches, p.batch_id, p.batch_size,
       greatest(p.b0 - r.start_ns, 0) / 1e6 AS queue_ms,
       p.in_batch_ns / 1e6 AS in_batch_ms,
       greatest(p.b1 - p.b0 - p.in_batch_ns, 0) / 1e6 AS between_batches_ms,
       greatest(r.end_ns - p.b1, 0) / 1e6 AS hand_back_ms,
       r.dur_ns / 1e6 AS end_to_end_ms,
       greatest(p.in_batch_ns - coalesce(o.staged_ns, 0), 0) / 1e6 AS batch_other_ms,
       coalesce(o.stages_json, '{}') AS stages_json,
       (g.first_token_ns - r.start_ns) / 1e6 AS ttft_ms,
       CASE WHEN g.decode_steps > 0 AND g.first_token_ns IS NOT NULL
            THEN (g.last_token_ns - g.first_token_ns) / g.decode_steps / 1e6 END AS tpot_ms,
       CASE WHEN g.first_token_ns IS NOT NULL THEN 1 + g.decode_steps END AS output_tokens
FROM per_req p
JOIN requests r ON r.trace_id = $trace_id AND r.request_id = p.request_id
LEFT JOIN stage_obj o ON o.request_id = p.request_id
LEFT JOIN gen g ON g.request_id = p.request_id
ORDER BY r.start_ns, r.request_id;
