-- name: request_sizes
-- returns: one row per request, slowest first: trace_id, request_id, e2e_ms, items, real_tokens, padded_tokens, padded_len, size_rank
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- Each request's input size beside its end-to-end time, from the facts recorded on the request
-- range and on its stages (docs/capture.md, call facts; or attributes set in code): items = the
-- request's `len()` of a list/str argument (`*.len` on the request range, e.g. texts.len, or
-- `batch`; the smallest when several); real/padded tokens = the largest `*mask.nonzero` / `*mask.numel` on
-- any of its stages (or `tokens` / `tokens + padded_tokens` set in code); padded_len = the
-- mask's second dimension. size_rank ranks requests by real tokens (1 = largest). NULL where the
-- trace holds no such fact.
WITH rq AS (
    SELECT * FROM requests WHERE trace_id = $trace_id
), req_facts AS (
    SELECT r.request_id,
           min(try_cast(a.value AS BIGINT))
               FILTER (WHERE a.key LIKE '%.len' AND a.key NOT LIKE 'return%' OR a.key = 'batch')
               AS items
    FROM rq r JOIN attributes a ON a.trace_id = r.trace_id AND a.event_id = r.event_id
    GROUP BY r.request_id
), masks AS (  -- 2-D attention masks only: the facts that have a non-zero count
    SELECT s.request_id, try_cast(nz.value AS BIGINT) AS real_tokens,
           try_cast(ne.value AS BIGINT) AS padded,
           try_cast(json_extract(sh.value, '$[1]') AS BIGINT) AS padded_len
    FROM stages s
    JOIN attributes nz ON nz.trace_id = s.trace_id AND nz.event_id = s.event_id
                      AND nz.key LIKE '%mask.nonzero'
    LEFT JOIN attributes ne ON ne.trace_id = s.trace_id AND ne.event_id = s.event_id
                           AND ne.key = replace(nz.key, '.nonzero', '.numel')
    LEFT JOIN attributes sh ON sh.trace_id = s.trace_id AND sh.event_id = s.event_id
                           AND sh.key = replace(nz.key, '.nonzero', '.shape')
    WHERE s.trace_id = $trace_id
), coded AS (  -- attributes set in code (examples/infer.py: tokens, padded_tokens, seq_len)
    SELECT s.request_id,
           max(try_cast(a.value AS BIGINT)) FILTER (WHERE a.key = 'tokens') AS real_tokens,
           max(try_cast(a.value AS BIGINT)) FILTER (WHERE a.key = 'padded_tokens') AS pads,
           max(try_cast(a.value AS BIGINT)) FILTER (WHERE a.key = 'seq_len') AS padded_len
    FROM stages s JOIN attributes a ON a.trace_id = s.trace_id AND a.event_id = s.event_id
    WHERE s.trace_id = $trace_id
    GROUP BY s.request_id
), stage_facts AS (
    SELECT coalesce(m.request_id, c.request_id) AS request_id,
           coalesce(m.real_tokens, c.real_tokens) AS real_tokens,
           coalesce(m.padded, c.real_tokens + c.pads) AS padded,
           coalesce(m.padded_len, c.padded_len) AS padded_len
    FROM (SELECT request_id FROM masks UNION SELECT request_id FROM coded) ids
    LEFT JOIN (SELECT request_id, max(real_tokens) AS real_tokens, max(padded) AS padded,
                      max(padded_len) AS padded_len FROM masks GROUP BY request_id) m
      USING (request_id)
    LEFT JOIN coded c USING (request_id)  -- (not a FULL JOIN: DuckDB cannot run that
)                                         -- inside a LATERAL join, tracekit.sql.over_traces)
SELECT $trace_id::INTEGER AS trace_id, r.request_id, r.dur_ns / 1e6 AS e2e_ms, q.items,
       f.real_tokens, f.padded AS padded_tokens, f.padded_len,
       CASE WHEN f.real_tokens IS NOT NULL
            THEN rank() OVER (ORDER BY f.real_tokens DESC NULLS LAST) END AS size_rank
FROM rq r LEFT JOIN req_facts q USING (request_id) LEFT JOIN stage_facts f USING (request_id)
ORDER BY r.dur_ns DESC, r.request_id;
