-- name: memcpy_summary
-- returns: one row per copy direction (HtoD, DtoH, DtoD, PtoP, HtoH, other) and memset: trace_id, direction, count, bytes, total_ms, mean_us, gb_per_s, pageable_count, pageable_bytes, sync_count, stages
-- param: $trace_id INTEGER trace to summarize
-- default: $trace_id 1
-- Direction comes from tk_copy_direction (tracekit/macros.sql); pageable memory from the
-- name ('Memcpy HtoD (Pageable -> Device)' in Kineto) or from args (srcKind / dstKind as
-- names or the nsys enum: memory kind 0 pageable). A copy is synchronous when the runtime call that launched it is not an *Async API
-- (cudaMemcpy, cuMemcpyHtoD ...). gb_per_s = bytes / GPU copy time (decimal GB).
WITH m AS (
    SELECT e.kind, e.name, e.dur_ns, e.stage, e.args, r.name AS api,
           lower(coalesce(e.args->>'srcKind', e.args->>'src_kind', '')) AS sk,
           lower(coalesce(e.args->>'dstKind', e.args->>'dst_kind', '')) AS dk,
           try_cast(coalesce(e.args->>'bytes', e.args->>'size', '0') AS DOUBLE) AS bytes
    FROM events e LEFT JOIN events r ON r.trace_id = e.trace_id AND r.event_id = e.launch_id
    WHERE e.trace_id = $trace_id AND e.kind IN ('memcpy', 'memset')
), d AS (
    SELECT *,
           tk_copy_direction(kind, name, args) AS direction,
           regexp_matches(name, '(?i)pageable') OR sk IN ('0', 'pageable') OR dk IN ('0', 'pageable')
               AS pageable,
           api IS NOT NULL AND NOT regexp_matches(api, '(?i)async') AS sync
    FROM m
)
SELECT $trace_id::INTEGER AS trace_id, direction, count(*) AS count,
       coalesce(sum(bytes), 0)::BIGINT AS bytes, sum(dur_ns) / 1e6 AS total_ms,
       avg(dur_ns) / 1e3 AS mean_us,
       CASE WHEN sum(dur_ns) > 0 AND direction <> 'memset' THEN sum(bytes) / sum(dur_ns) END
           AS gb_per_s,
       count(*) FILTER (WHERE pageable AND kind = 'memcpy') AS pageable_count,
       coalesce(sum(bytes) FILTER (WHERE pageable AND kind = 'memcpy'), 0)::BIGINT
           AS pageable_bytes,
       count(*) FILTER (WHERE sync) AS sync_count,
       string_agg(DISTINCT coalesce(stage, '(no stage)'), ', '
                  ORDER BY coalesce(stage, '(no stage)')) AS stages
FROM d
GROUP BY direction
ORDER BY CASE direction WHEN 'HtoD' THEN 1 WHEN 'DtoH' THEN 2 WHEN 'DtoD' THEN 3
                        WHEN 'PtoP' THEN 4 WHEN 'HtoH' THEN 5 WHEN 'other' THEN 6 ELSE 7 END;
