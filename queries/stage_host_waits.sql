-- name: stage_host_waits
-- returns: one row per stage whose host thread waits for the GPU inside it: trace_id, stage, stage_ms, wait_ms, waits, share_of_stage, op, op_wait_ms, call
-- param: $trace_id INTEGER trace to examine
-- default: $trace_id 1
-- The host blocked on the GPU inside a stage: runtime calls that wait for the device
-- (*Synchronize*: cudaStreamSynchronize, cudaDeviceSynchronize, hipEventSynchronize ...; and the
-- synchronous copies cudaMemcpy / hipMemcpy / hipMemcpyWithStream / cuMemcpy*, the ones
-- without Async) on the stage's thread, attributed to the stage as host events are (innermost
-- open stage). wait_ms = union of those calls per thread, summed over threads; stage_ms = the
-- stage's summed range time. op = the outermost operator around the waiting calls (aten::to for a
-- .to("cpu"), aten::item, ...; else the Python frame that made the call, else the call itself)
-- with the most wait time; op_wait_ms its share; call = the runtime call it waits in.
WITH waits AS (
    SELECT trace_id, event_id, name, stage, pid, tid, start_ns, end_ns, dur_ns, parent_id
    FROM events WHERE trace_id = $trace_id AND kind = 'runtime' AND tid IS NOT NULL AND stage IS NOT NULL
      AND (name ILIKE '%synchronize%'
           OR regexp_matches(name,
                             '^((cuda|hip)Memcpy(WithStream|2D|3D|DtoH|HtoD|DtoD)?|cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?)$'))
), top_ops AS (  -- operators with no operator around them: they never overlap on a thread
    SELECT o.pid, o.tid, o.start_ns, o.end_ns, tk_op_name(o.name) AS op
    FROM events o LEFT JOIN events p ON p.trace_id = o.trace_id AND p.event_id = o.parent_id
    WHERE o.trace_id = $trace_id AND o.kind = 'cpu_op' AND o.tid IS NOT NULL
      AND p.kind IS DISTINCT FROM 'cpu_op'
      AND o.tid IN (SELECT tid FROM waits)
), around AS (  -- the top-level op that holds each wait (they never overlap on a thread)
    SELECT w.event_id, any_value(o.op) AS op
    FROM waits w JOIN top_ops o
      ON o.pid = w.pid AND o.tid = w.tid AND o.start_ns <= w.start_ns AND o.end_ns >= w.end_ns
    GROUP BY w.event_id
), named AS (
    SELECT w.*, coalesce(a.op, CASE WHEN f.kind = 'python' THEN f.name END, w.name) AS op
    FROM waits w LEFT JOIN around a USING (event_id)
    LEFT JOIN events f ON f.trace_id = w.trace_id AND f.event_id = w.parent_id
), iv AS (
    SELECT {'stage': stage, 'pid': pid, 'tid': tid} AS key, start_ns, end_ns FROM waits
), per_stage AS (
    SELECT key.stage AS stage, sum(union_ns) AS wait_ns, sum(n) AS waits
    FROM tk_union_ns('iv') GROUP BY key.stage
), per_op AS (
    SELECT stage, op, sum(dur_ns) AS ns, arg_max(name, (dur_ns, name)) AS call
    FROM named GROUP BY ALL
), top_op AS (  -- (ties to the larger name: arg_max alone picks any of them)
    SELECT stage, arg_max(op, (ns, op)) AS op, max(ns) AS ns, arg_max(call, (ns, op)) AS call
    FROM per_op GROUP BY stage
), stage_ns AS (
    SELECT stage, sum(dur_ns) AS ns FROM stages WHERE trace_id = $trace_id GROUP BY stage
)
SELECT $trace_id::INTEGER AS trace_id, p.stage, s.ns / 1e6 AS stage_ms, p.wait_ns / 1e6 AS wait_ms,
       p.waits, p.wait_ns / nullif(s.ns, 0) AS share_of_stage, t.op, t.ns / 1e6 AS op_wait_ms,
       t.call
FROM per_stage p JOIN stage_ns s USING (stage) JOIN top_op t USING (stage)
ORDER BY wait_ms DESC, p.stage;
