-- name: gpu_timeline
-- returns: per device, the trace span cut into $bins equal bins: trace_id, device, bin, start_ms (from trace start), bin_ms, busy_ms, busy_share
-- param: $trace_id INTEGER trace to read
-- param: $bins INTEGER bins across the trace span
-- default: $trace_id 1
-- default: $bins 200
-- GPU busy over time, for the report's per-device strip. busy_ms = the length of the union of
-- the device's kernel, memcpy and memset intervals (all streams together: tk_islands) inside
-- the bin, so the bins of a device add up to its busy time in gpu_devices: the device's busy
-- time up to each bin edge (tk_busy_upto), differenced.
WITH iv AS (
    SELECT coalesce(device, -1) AS key, start_ns, end_ns FROM events
    WHERE trace_id = $trace_id AND kind IN ('kernel', 'memcpy', 'memset')
), span AS (
    SELECT start_ns AS t0, greatest(duration_ns, 1) / $bins::DOUBLE AS w
    FROM traces WHERE trace_id = $trace_id
), edges AS (  -- bin k runs from edge k to edge k + 1
    SELECT unnest(range(0, $bins + 1)) AS k
), points AS (
    SELECT d.key, e.k AS point_id, CAST(round(s.t0 + e.k * s.w) AS BIGINT) AS t
    FROM edges e CROSS JOIN span s CROSS JOIN (SELECT DISTINCT key FROM iv) d
), busy_at AS (  -- device busy time up to edge k
    SELECT p.key, p.point_id AS k, p.t, b.busy_ns AS ns
    FROM points p JOIN tk_busy_upto('iv', 'points') b USING (key, point_id)
), bins AS (
    SELECT key, k, t, lead(t) OVER (PARTITION BY key ORDER BY k) - t AS bin_ns,
           lead(ns) OVER (PARTITION BY key ORDER BY k) - ns AS busy_ns
    FROM busy_at
)
SELECT $trace_id::INTEGER AS trace_id, b.key AS device, b.k AS bin, (b.t - s.t0) / 1e6 AS start_ms,
       b.bin_ns / 1e6 AS bin_ms, b.busy_ns / 1e6 AS busy_ms,
       b.busy_ns / nullif(b.bin_ns, 0) AS busy_share
FROM bins b CROSS JOIN span s
WHERE b.bin_ns IS NOT NULL
ORDER BY device, bin;
