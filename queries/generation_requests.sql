-- name: generation_requests
-- returns: one row per request with generation steps: trace_id, request_id, e2e_ms, ttft_ms, prefill_steps, decode_steps, tpot_ms, batch_size, output_tokens, output_tokens_per_s
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- Generation split into steps: stages named prefill and decode (from a generate call's model
-- forwards, an engine's step markers such as SGLang's step[DECODE bs=16], or tracekit.stage).
-- ttft_ms = time to first token: the request's start until its first token is out - the start
-- of the step after the first prefill (the prefill's logits are then sampled, checked against
-- the stopping criteria and handed to the caller: one measured request spent 8 ms there), or the
-- end of that prefill when no step follows it.
-- tpot_ms = time per output token: from the end of the first prefill to the end of the last
-- decode step, divided by the decode steps (each decode step makes one token per sequence);
-- a request with no prefill step (an engine's decode iteration): the mean decode step.
-- A step ends when the GPU work it launched ends, if that is later than its host range (an
-- engine's decode step replays a CUDA graph that runs on after the launch returns).
-- batch_size = the steps' batch_size attribute (engine markers), else NULL.
-- output_tokens = tokens per sequence (the prefill makes the first) times the batch size when
-- known; output_tokens_per_s = output_tokens / (the request's start to its end or its last
-- step's end, whichever is later).
WITH host_steps AS (
    SELECT s.request_id, s.stage, s.start_ns, s.end_ns, s.event_id, coalesce(s.pid, -1) AS pid,
           s.tid
    FROM stages s
    WHERE s.trace_id = $trace_id AND s.stage IN ('prefill', 'decode') AND s.request_id IS NOT NULL
), gpu_end AS (  -- the end of the GPU work each step launched (a graph replay outlives its launch)
    SELECT st.event_id, max(k.end_ns) AS end_ns
    FROM host_steps st
    JOIN events l ON l.trace_id = $trace_id AND l.kind = 'runtime' AND l.tid = st.tid
     AND coalesce(l.pid, -1) = st.pid AND l.start_ns >= st.start_ns AND l.start_ns <= st.end_ns
    JOIN events k ON k.trace_id = $trace_id AND k.launch_id = l.event_id
     AND k.kind IN ('kernel', 'memcpy', 'memset')
    GROUP BY st.event_id
), steps AS (
    SELECT st.request_id, st.stage, st.start_ns, greatest(st.end_ns, g.end_ns) AS end_ns,
           st.event_id
    FROM host_steps st LEFT JOIN gpu_end g USING (event_id)
), batch AS (
    SELECT st.request_id, max(try_cast(a.value AS BIGINT)) AS batch_size
    FROM steps st JOIN attributes a ON a.trace_id = $trace_id AND a.event_id = st.event_id
    WHERE a.key = 'batch_size' GROUP BY st.request_id
), per_req AS (
    SELECT r.request_id, r.start_ns, r.end_ns, r.dur_ns,
           count(*) FILTER (WHERE s.stage = 'prefill') AS prefill_steps,
           min(s.end_ns) FILTER (WHERE s.stage = 'prefill') AS prefill_end,
           count(*) FILTER (WHERE s.stage = 'decode') AS decode_steps,
           max(s.end_ns) FILTER (WHERE s.stage = 'decode') AS last_decode_end,
           sum(s.end_ns - s.start_ns) FILTER (WHERE s.stage = 'decode') AS decode_ns,
           greatest(r.end_ns, max(s.end_ns)) AS done_ns
    FROM requests r JOIN steps s USING (request_id)
    WHERE r.trace_id = $trace_id
    GROUP BY r.request_id, r.start_ns, r.end_ns, r.dur_ns
), figures AS (
    SELECT p.*, b.batch_size,
           (p.decode_steps + CASE WHEN p.prefill_steps > 0 THEN 1 ELSE 0 END)
               * coalesce(b.batch_size, 1) AS output_tokens
    FROM per_req p LEFT JOIN batch b USING (request_id)
), first_out AS (  -- the first step that starts after the first prefill ended
    SELECT p.request_id, min(s.start_ns) AS next_start
    FROM per_req p JOIN steps s ON s.request_id = p.request_id AND s.start_ns >= p.prefill_end
    GROUP BY p.request_id
)
SELECT $trace_id::INTEGER AS trace_id, request_id, dur_ns / 1e6 AS e2e_ms,
       (coalesce(o.next_start, prefill_end) - start_ns) / 1e6 AS ttft_ms, prefill_steps,
       decode_steps,
       CASE WHEN decode_steps = 0 THEN NULL
            WHEN prefill_end IS NOT NULL AND last_decode_end > prefill_end
            THEN (last_decode_end - prefill_end) / decode_steps / 1e6
            ELSE decode_ns / decode_steps / 1e6 END AS tpot_ms,
       batch_size, output_tokens,
       output_tokens / nullif((done_ns - start_ns) / 1e9, 0) AS output_tokens_per_s
FROM figures LEFT JOIN first_out o USING (request_id)
ORDER BY request_id;
