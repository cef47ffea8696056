-- name: memory_timeline
-- returns: per device with allocator events, the trace span cut into $bins equal bins: trace_id, device, bin, start_ms (from trace start), bin_ms, events, allocated_bytes, reserved_bytes
-- param: $trace_id INTEGER trace to read
-- param: $bins INTEGER bins across the trace span
-- default: $trace_id 1
-- default: $bins 200
-- Memory over time, for the report's chart: per bin the largest "Total Allocated" and
-- "Total Reserved" any `[memory]` event in it reports; a bin without events holds the totals
-- of the last event before it (NULL before the first). So the largest bin equals the peak in
-- memory_peaks. Events without totals (torch 1.9): the running sum of Bytes, as there.
WITH span AS (
    SELECT start_ns AS t0, greatest(duration_ns, 1) / $bins::DOUBLE AS w
    FROM traces WHERE trace_id = $trace_id
), m AS (
    SELECT coalesce(TRY_CAST(e.args->>'Device Id' AS INTEGER), -1) AS device,
           least(greatest(floor((e.start_ns - s.t0) / s.w)::BIGINT, 0), $bins - 1) AS k,
           coalesce(TRY_CAST(e.args->>'Total Allocated' AS BIGINT),
                    sum(TRY_CAST(e.args->>'Bytes' AS BIGINT)) OVER (
                        PARTITION BY coalesce(TRY_CAST(e.args->>'Device Id' AS INTEGER), -1)
                        ORDER BY e.start_ns, e.event_id ROWS UNBOUNDED PRECEDING)) AS allocated,
           TRY_CAST(e.args->>'Total Reserved' AS BIGINT) AS reserved,
           row_number() OVER (PARTITION BY coalesce(TRY_CAST(e.args->>'Device Id' AS INTEGER), -1)
                              ORDER BY e.start_ns, e.event_id) AS seq
    FROM events e CROSS JOIN span s
    WHERE e.trace_id = $trace_id AND e.kind = 'mark' AND e.name = '[memory]'
), per_bin AS (
    SELECT device, k, count(*) AS events, max(allocated) AS peak_alloc, max(reserved) AS peak_res,
           arg_max(allocated, seq) AS last_alloc, arg_max(reserved, seq) AS last_res
    FROM m GROUP BY device, k
), grid AS (
    SELECT d.device, k.k, s.t0 + CAST(round(k.k * s.w) AS BIGINT) - s.t0 AS b0,
           CAST(round((k.k + 1) * s.w) AS BIGINT) - CAST(round(k.k * s.w) AS BIGINT) AS bw
    FROM (SELECT DISTINCT device FROM m) d
    CROSS JOIN (SELECT unnest(range(0, $bins)) AS k) k CROSS JOIN span s
), filled AS (
    SELECT g.device, g.k, g.b0, g.bw, coalesce(p.events, 0) AS events, p.peak_alloc, p.peak_res,
           last_value(p.last_alloc IGNORE NULLS) OVER w AS carry_alloc,
           last_value(p.last_res IGNORE NULLS) OVER w AS carry_res
    FROM grid g LEFT JOIN per_bin p USING (device, k)
    WINDOW w AS (PARTITION BY g.device ORDER BY g.k ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT $trace_id::INTEGER AS trace_id, device, k AS bin, b0 / 1e6 AS start_ms, bw / 1e6 AS bin_ms,
       events, coalesce(peak_alloc, carry_alloc) AS allocated_bytes,
       coalesce(peak_res, carry_res) AS reserved_bytes
FROM filled
ORDER BY device, bin;
