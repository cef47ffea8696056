-- name: padding_waste
-- returns: one row per stage whose ranges carry an attention-mask fact: trace_id, stage, ranges, real_tokens, padded_tokens, padding_share, mean_padded_len, max_real_per_range, ms_per_1k_padded_tokens
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- Padding waste from the facts `--stage`/`--request` record about a wrapped call (docs/capture.md):
-- for a 2-D attention-mask-like tensor (key ending in `mask`), `<key>.numel` = padded tokens and
-- `<key>.nonzero` = real tokens. padding_share = 1 - real / padded: the share of the tokens the
-- model computes on that are padding. mean_padded_len = mean of the mask's second dimension.
WITH facts AS (
    SELECT s.stage, s.event_id, s.dur_ns, a.key, a.value
    FROM stages s
    JOIN attributes a ON a.trace_id = s.trace_id AND a.event_id = s.event_id
    WHERE s.trace_id = $trace_id
      AND (a.key LIKE '%mask.nonzero' OR a.key LIKE '%mask.numel' OR a.key LIKE '%mask.shape')
), per_range AS (
    SELECT stage, event_id, any_value(dur_ns) AS dur_ns,
           max(try_cast(value AS DOUBLE)) FILTER (WHERE key LIKE '%.nonzero') AS real,
           max(try_cast(value AS DOUBLE)) FILTER (WHERE key LIKE '%.numel') AS padded,
           max(try_cast(json_extract(value, '$[1]') AS DOUBLE))
               FILTER (WHERE key LIKE '%.shape') AS padded_len
    FROM facts GROUP BY stage, event_id
)
SELECT $trace_id::INTEGER AS trace_id, stage, count(*) AS ranges,
       sum(real)::BIGINT AS real_tokens, sum(padded)::BIGINT AS padded_tokens,
       CASE WHEN sum(padded) > 0 THEN 1 - sum(real) / sum(padded) END AS padding_share,
       avg(padded_len) AS mean_padded_len, max(real)::BIGINT AS max_real_per_range,
       CASE WHEN sum(padded) > 0 THEN sum(dur_ns) / 1e6 / (sum(padded) / 1e3) END
           AS ms_per_1k_padded_tokens
FROM per_range
WHERE real IS NOT NULL AND padded IS NOT NULL
GROUP BY stage
ORDER BY stage;
