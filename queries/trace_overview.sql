-- name: trace_overview
-- returns: one row: trace_id, file (base name), format, tool_version, host, rank, span_ms, events, host_threads, requests, request_source, stages, stage_names, kernels, gpu_events, devices (count), device_names, skipped_count
-- param: $trace_id INTEGER trace to describe
-- default: $trace_id 1
-- What the trace is: its source and tool, its span (first event start to last end), how many
-- events, requests and stage ranges it holds, and the GPUs it names ('GPU <id>' for a device
-- the trace records without a name).
SELECT t.trace_id, regexp_extract(t.path, '[^/\\]+$') AS file, t.format, t.tool_version,
       t.host, t.rank, t.duration_ns / 1e6 AS span_ms,
       (SELECT count(*) FROM events WHERE trace_id = t.trace_id) AS events,
       (SELECT count(DISTINCT (pid, tid)) FROM events
         WHERE trace_id = t.trace_id AND tid IS NOT NULL) AS host_threads,
       (SELECT count(*) FROM requests WHERE trace_id = t.trace_id) AS requests,
       (SELECT min(source) FROM requests WHERE trace_id = t.trace_id) AS request_source,
       (SELECT count(*) FROM stages WHERE trace_id = t.trace_id) AS stages,
       (SELECT string_agg(stage, ', ' ORDER BY first, stage) FROM (
           SELECT stage, min(start_ns) AS first FROM stages WHERE trace_id = t.trace_id
           GROUP BY stage)) AS stage_names,
       (SELECT count(*) FROM events WHERE trace_id = t.trace_id AND kind = 'kernel') AS kernels,
       (SELECT count(*) FROM events
         WHERE trace_id = t.trace_id AND kind IN ('kernel', 'memcpy', 'memset')) AS gpu_events,
       coalesce(json_array_length(t.devices), 0) AS devices,
       (SELECT string_agg(DISTINCT coalesce(d->>'name', 'GPU ' || (d->>'id')), ', '
                           ORDER BY coalesce(d->>'name', 'GPU ' || (d->>'id')))
          FROM (SELECT unnest(CAST(t.devices AS JSON[])) AS d)) AS device_names,
       t.skipped_count
FROM traces t
WHERE t.trace_id = $trace_id
ORDER BY t.trace_id;
