-- name: sequence_lengths
-- returns: one row per request whose stage or request range records its sequences' real lengths: trace_id, request_id, stage, key, lengths (JSON list, one real token count per sequence of the batch), sequences
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- Real (unpadded) lengths, for the share of attention FLOPs spent on padding (tracekit/roofline.py):
-- an attribute `lengths` set on a stage (`stage.set(lengths=[...])`), or the `<mask>.lengths`
-- fact `--stage`/`--request` record for a 2-D attention mask (its per-row non-zero counts). When
-- a request has several, the first stage range (then key) wins.
WITH facts AS (
    SELECT coalesce(s.request_id, r.request_id) AS request_id, coalesce(s.stage, '(request)') AS stage,
           a.event_id, a.key, a.value
    FROM attributes a
    LEFT JOIN stages s ON s.trace_id = a.trace_id AND s.event_id = a.event_id
    LEFT JOIN requests r ON r.trace_id = a.trace_id AND r.event_id = a.event_id
    WHERE a.trace_id = $trace_id AND (a.key = 'lengths' OR a.key LIKE '%mask.lengths')
      AND a.value LIKE '[%'
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY request_id ORDER BY event_id, key) AS n
    FROM facts WHERE request_id IS NOT NULL
)
SELECT $trace_id::INTEGER AS trace_id, request_id, stage, key, value AS lengths,
       json_array_length(value)::BIGINT AS sequences
FROM ranked WHERE n = 1
ORDER BY request_id;
