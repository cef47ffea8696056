-- name: memory_peaks
-- returns: one row per device with allocator events, then one per device and stage: trace_id, scope ('device' | 'stage'), device, device_name, stage, events, allocations, frees, peak_allocated_bytes, peak_reserved_bytes, peak_at_ms (from trace start), capacity_bytes, share_of_capacity, reserved_over_allocated
-- param: $trace_id INTEGER trace to read
-- default: $trace_id 1
-- From the caching allocator's events (torch.profiler profile_memory=True: `[memory]` instants
-- whose args carry "Total Allocated" and "Total Reserved" after each allocation or free, "Bytes"
-- (negative for a free) and "Device Id", -1 for host memory). A peak is the largest total any
-- event reports, so it is exact only at event times, which is where the allocator changes it.
-- A stage's peak: the largest total among the events attributed to it (events.stage). Where
-- the events carry no totals (torch 1.9), allocated is the running sum of Bytes from the
-- trace's start (growth, not the absolute total) and reserved is NULL.
-- capacity_bytes: the device's totalGlobalMem (Kineto deviceProperties) or totalMemory (nsys),
-- NULL where the trace records neither; reserved_over_allocated = peak reserved / peak allocated.
WITH m AS (
    SELECT e.start_ns, e.event_id, e.stage,
           coalesce(TRY_CAST(e.args->>'Device Id' AS INTEGER), -1) AS device,
           TRY_CAST(e.args->>'Bytes' AS BIGINT) AS bytes,
           TRY_CAST(e.args->>'Total Allocated' AS BIGINT) AS reported,
           TRY_CAST(e.args->>'Total Reserved' AS BIGINT) AS reserved
    FROM events e
    WHERE e.trace_id = $trace_id AND e.kind = 'mark' AND e.name = '[memory]'
), totals AS (  -- older torch (1.9) records only Bytes: its running sum from the trace's start
    SELECT *, coalesce(reported, sum(bytes) OVER (PARTITION BY device ORDER BY start_ns, event_id
                                                  ROWS UNBOUNDED PRECEDING)) AS allocated
    FROM m
), peaks AS (  -- the peaks each event's device and stage reach, to find when they are reached
    SELECT *, max(allocated) OVER (PARTITION BY device) AS device_peak,
           max(allocated) OVER (PARTITION BY device, stage) AS stage_peak
    FROM totals
), per AS (
    SELECT 'device' AS scope, device, NULL::VARCHAR AS stage, count(*) AS events,
           count(*) FILTER (WHERE bytes > 0) AS allocations,
           count(*) FILTER (WHERE bytes < 0) AS frees,
           max(allocated) AS peak_allocated_bytes, max(reserved) AS peak_reserved_bytes,
           min(start_ns) FILTER (WHERE allocated = device_peak) AS peak_ns
    FROM peaks GROUP BY device
    UNION ALL
    SELECT 'stage', device, stage, count(*), count(*) FILTER (WHERE bytes > 0),
           count(*) FILTER (WHERE bytes < 0), max(allocated), max(reserved),
           min(start_ns) FILTER (WHERE allocated = stage_peak)
    FROM peaks WHERE stage IS NOT NULL GROUP BY device, stage
), cap AS (
    SELECT TRY_CAST(d->>'id' AS INTEGER) AS device,
           max(coalesce(TRY_CAST(d->>'totalGlobalMem' AS BIGINT),
                        TRY_CAST(d->>'totalMemory' AS BIGINT))) AS capacity_bytes
    FROM (SELECT unnest(CAST(devices AS JSON[])) AS d FROM traces WHERE trace_id = $trace_id)
    GROUP BY 1
)
SELECT $trace_id::INTEGER AS trace_id, p.scope, p.device,
       CASE WHEN p.device < 0 THEN 'host' ELSE coalesce(n.device_name, 'GPU ' || p.device) END
           AS device_name,
       p.stage, p.events, p.allocations, p.frees, p.peak_allocated_bytes, p.peak_reserved_bytes,
       (p.peak_ns - t.start_ns) / 1e6 AS peak_at_ms,
       CASE WHEN p.device >= 0 THEN c.capacity_bytes END AS capacity_bytes,
       CASE WHEN p.device >= 0 THEN p.peak_allocated_bytes / nullif(c.capacity_bytes, 0) END
           AS share_of_capacity,
       nullif(p.peak_reserved_bytes, 0) / nullif(p.peak_allocated_bytes, 0) AS reserved_over_allocated
FROM per p
JOIN traces t ON t.trace_id = $trace_id
LEFT JOIN cap c USING (device)
LEFT JOIN tk_device_names($trace_id) n USING (device)
ORDER BY p.scope, p.device < 0, p.device, p.peak_allocated_bytes DESC NULLS LAST, p.stage;
