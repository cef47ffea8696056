-- name: gpu_timeline
-- returns: per device, the trace span cut into $bins equal bins: trace_id, device, bin, start_ms (from trace start), bin_ms, busy_ms, busy_share
-- param: $trace_id INTEGER trace to read
-- param: $bins INTEGER bins across the trace span
-- default: $trace_id 1
-- default: $bins 200
-- GPU busy over time, for the report's per-device strip. busy_ms = the length of the union of
-- the device's kernel, memcpy and memset intervals (all streams together: its gpu_islands)
-- inside the bin, so the bins of a device add up to its busy time in gpu_devices. Each island
-- goes to the bins it overlaps, clipped to each: one pass over the islands, no sort.
WITH span AS (
    SELECT start_ns AS t0, greatest(duration_ns, 1) / $bins::DOUBLE AS w
    FROM traces WHERE trace_id = $trace_id
), edges AS (  -- bin k runs from edge k to edge k + 1 (offsets from t0 in doubles: an
               -- epoch-scale t0 would lose up to 256 ns)
    SELECT k, s.t0 + CAST(round(k * s.w) AS BIGINT) AS b0,
           s.t0 + CAST(round((k + 1) * s.w) AS BIGINT) AS b1
    FROM (SELECT unnest(range(0, $bins)) AS k) CROSS JOIN span s
), devices AS (
    SELECT DISTINCT coalesce(device, -1) AS device FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
), guess AS (  -- the bins an island may overlap, one more each side for the edges' rounding
    SELECT i.device, i.start_ns, i.end_ns,
           unnest(range(greatest(floor((i.start_ns - s.t0) / s.w)::BIGINT - 1, 0),
                        least(floor((i.end_ns - s.t0) / s.w)::BIGINT + 2, $bins))) AS k
    FROM gpu_islands i CROSS JOIN span s WHERE i.trace_id = $trace_id
), busy AS (
    SELECT g.device, g.k, sum(least(g.end_ns, e.b1) - greatest(g.start_ns, e.b0)) AS busy_ns
    FROM guess g JOIN edges e USING (k)
    WHERE g.start_ns < e.b1 AND g.end_ns > e.b0
    GROUP BY g.device, g.k
)
SELECT $trace_id::INTEGER AS trace_id, d.device, e.k AS bin, (e.b0 - s.t0) / 1e6 AS start_ms,
       (e.b1 - e.b0) / 1e6 AS bin_ms, coalesce(b.busy_ns, 0) / 1e6 AS busy_ms,
       coalesce(b.busy_ns, 0) / nullif(e.b1 - e.b0, 0) AS busy_share
FROM devices d CROSS JOIN edges e CROSS JOIN span s
LEFT JOIN busy b ON b.device = d.device AND b.k = e.k
ORDER BY d.device, e.k;
