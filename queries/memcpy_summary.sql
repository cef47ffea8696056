-- name: memcpy_summary
-- returns: one row per copy direction (HtoD, DtoH, DtoD, PtoP, HtoH, other) and memset: trace_id, direction, count, bytes, total_ms, mean_us, gb_per_s, pageable_count, pageable_bytes, sync_count, stages
-- param: $trace_id INTEGER trace to summarize
-- default: $trace_id 1
-- Direction and pageable memory come from the name ('Memcpy HtoD (Pageable -> Device)' in
-- Kineto, '[CUDA memcpy Host-to-Device]' style in nsys) or from args (copyKind / srcKind /
-- dstKind as names or nsys enum numbers: copy 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP; memory kind 0
-- pageable). A copy is synchronous when the runtime call that launched it is not an *Async API
-- (cudaMemcpy, cuMemcpyHtoD ...). gb_per_s = bytes / GPU copy time (decimal GB).
WITH m AS (
    SELECT e.kind, e.name, e.dur_ns, e.stage, e.args, r.name AS api,
           lower(coalesce(e.args->>'copyKind', e.args->>'copy_kind', e.args->>'kind', ''))
               AS ck,
           lower(coalesce(e.args->>'srcKind', e.args->>'src_kind', '')) AS sk,
           lower(coalesce(e.args->>'dstKind', e.args->>'dst_kind', '')) AS dk,
           try_cast(coalesce(e.args->>'bytes', e.args->>'size', '0') AS DOUBLE) AS bytes
    FROM events e LEFT JOIN events r ON r.trace_id = e.trace_id AND r.event_id = e.launch_id
    WHERE e.trace_id = $trace_id AND e.kind IN ('memcpy', 'memset')
), d AS (
    SELECT *,
           CASE
               WHEN kind = 'memset' THEN 'memset'
               WHEN regexp_matches(name, '(?i)HtoD|Host-to-Device|H2D') OR ck IN ('1', 'htod', 'h2d')
                   THEN 'HtoD'
               WHEN regexp_matches(name, '(?i)DtoH|Device-to-Host|D2H') OR ck IN ('2', 'dtoh', 'd2h')
                   THEN 'DtoH'
               WHEN regexp_matches(name, '(?i)DtoD|Device-to-Device|D2D') OR ck IN ('8', 'dtod', 'd2d')
                   THEN 'DtoD'
               WHEN regexp_matches(name, '(?i)PtoP|Peer-to-Peer|P2P') OR ck IN ('10', 'ptop', 'p2p')
                   THEN 'PtoP'
               WHEN regexp_matches(name, '(?i)HtoH|Host-to-Host') OR ck IN ('htoh', 'h2h')
                   THEN 'HtoH'
               ELSE 'other'
           END AS direction,
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
