-- Kineto/Chrome trace events → events rows, in SQL: the fast path of tracekit/ingest/kineto.py.
-- Reads the traceEvents array that json_scan.extract_events_array wrote to its own file
-- (@events_json is replaced by that path, quoted), with DuckDB's read_json (C++, all cores).
-- An element over 64 MiB (read_json buffers twice that) makes kineto.py use the Python mapper.
-- Defines:
--   _kineto_events  temp table: one row per element, event_id = its 1-based position, with
--                   the Python mapper's rules applied: fate ('placed', 'skipped', 'elsewhere',
--                   'python') and reason; 'python' rows (metadata, instants, begin/end pairs,
--                   unknown phases) are mapped by kineto.py.
--   _kineto_labels  table: non-integer pid/tid labels ('Spans') with ids -1, -2, ... by first
--                   appearance, pid before tid.
-- Then inserts the placed rows into `events` (parameter $trace_id). @kind_case is replaced by
-- a CASE over cat_l built from kineto.py's CATEGORY_KINDS (a join to a table of them cost 0.4 s
-- per 1e6 events).

-- A pid/tid as an integer when it is one ("4242", "stream 7", 1.5 → 1), else NULL.
CREATE OR REPLACE TEMP MACRO tk_not_min(v) AS CASE WHEN v > -9223372036854775808 THEN v END;
CREATE OR REPLACE TEMP MACRO tk_thread_int(v) AS CASE
    WHEN v IS NULL THEN NULL
    WHEN regexp_full_match(v, '-?[0-9]+') THEN tk_not_min(TRY_CAST(v AS BIGINT))
    WHEN v = 'true' THEN 1
    WHEN v = 'false' THEN 0
    WHEN isfinite(TRY_CAST(v AS DOUBLE)) AND abs(TRY_CAST(v AS DOUBLE)) < 9223372036854775808.0
        THEN trunc(TRY_CAST(v AS DOUBLE))::BIGINT
    WHEN regexp_full_match(string_split(v, ' ')[-1], '-?[0-9]+')
        THEN tk_not_min(TRY_CAST(string_split(v, ' ')[-1] AS BIGINT))
    END;

-- An integer argument (int, or finite float truncated), as the Python mapper's _int_arg.
CREATE OR REPLACE TEMP MACRO tk_int_arg(j) AS CASE json_type(j)
    WHEN 'BIGINT' THEN tk_not_min(j::BIGINT)
    WHEN 'UBIGINT' THEN TRY_CAST(j::VARCHAR AS BIGINT)
    WHEN 'DOUBLE' THEN CASE WHEN isfinite(j::DOUBLE) AND abs(j::DOUBLE) < 9223372036854775808.0
                            THEN trunc(j::DOUBLE)::BIGINT END
    END;

-- µs → ns, whole and fraction scaled apart so epoch-µs values keep their nanoseconds; ties
-- round to even like Python's round(). NULL when out of range.
CREATE OR REPLACE TEMP MACRO tk_us_to_ns(x) AS CASE WHEN x < 1e20
    THEN trunc(x)::HUGEINT * 1000 + round_even((x - trunc(x)) * 1000.0, 0)::HUGEINT END;

CREATE OR REPLACE TEMP VIEW _kineto_read AS
SELECT ordinality AS event_id, ph, cat, name, pid, tid, ts, dur, args
FROM read_json(@events_json, format = 'array', maximum_object_size = 67108864,
               columns = {ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
                          tid: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE', args: 'JSON'})
     WITH ORDINALITY;

-- One pass over the file: every element's fate; the placed ones fully mapped, the 'python'
-- ones as read, the rest only counted. pid/tid text is kept where it is not an integer.
CREATE OR REPLACE TEMP TABLE _kineto_events AS
WITH x AS (
    SELECT r.*, lower(coalesce(r.cat, '')) AS cat_l,
           CASE WHEN r.ph = 'X' THEN tk_us_to_ns(r.ts) END AS start_h,
           CASE WHEN r.ph = 'X' THEN tk_us_to_ns(r.dur) END AS dur_h,
           tk_thread_int(r.pid) AS pid_i, tk_thread_int(r.tid) AS tid_i
    FROM _kineto_read r
), f AS (
    SELECT x.*, @kind_case AS kind,
        CASE
            WHEN x.ph IN ('s', 't', 'f') THEN 'elsewhere'
            WHEN x.ph = 'C' THEN 'skipped'
            WHEN x.ph IS DISTINCT FROM 'X' THEN 'python'
            WHEN x.cat_l = 'trace' THEN 'elsewhere'
            WHEN x.ts IS NULL OR NOT isfinite(x.ts) OR x.ts < 0 THEN 'skipped'
            WHEN x.dur IS NULL OR NOT isfinite(x.dur) OR x.dur < 0 THEN 'skipped'
            WHEN x.start_h IS NULL OR x.dur_h IS NULL
                 OR x.start_h + x.dur_h > 9223372036854775807 THEN 'skipped'
            ELSE 'placed'
        END AS fate,
        CASE
            WHEN x.ph IN ('s', 't', 'f') THEN 'flow (links kept as correlation ids)'
            WHEN x.ph = 'C' THEN 'counter event'
            WHEN x.ph IS DISTINCT FROM 'X' THEN NULL
            WHEN x.cat_l = 'trace' THEN 'profiler span (traces row)'
            WHEN x.ts IS NULL THEN 'missing or non-numeric ts'
            WHEN NOT isfinite(x.ts) THEN 'non-finite ts'
            WHEN x.ts < 0 THEN 'negative ts'
            WHEN x.dur IS NULL OR NOT isfinite(x.dur) THEN 'missing or non-numeric dur'
            WHEN x.dur < 0 THEN 'negative dur'
            WHEN x.start_h IS NULL OR x.dur_h IS NULL
                 OR x.start_h + x.dur_h > 9223372036854775807 THEN 'ts or dur out of range'
        END AS reason
    FROM x
), a AS (
    SELECT f.*,
        CASE WHEN fate = 'placed' AND starts_with(f.args::VARCHAR, '{')
             THEN json_transform(f.args, '{"device": "JSON", "stream": "JSON", "correlation": "JSON",
                                          "External id": "JSON"}')
        END AS known
    FROM f
)
SELECT event_id, fate, reason,
    CASE WHEN fate = 'placed' THEN kind END AS kind,
    CASE WHEN fate = 'placed' THEN coalesce(name, '') WHEN fate = 'python' THEN name END AS name,
    CASE WHEN fate = 'placed' THEN start_h::BIGINT END AS start_ns,
    CASE WHEN fate = 'placed' THEN (start_h + dur_h)::BIGINT END AS end_ns,
    pid_i, tid_i,
    CASE WHEN fate = 'python' OR pid_i IS NULL THEN pid END AS pid,
    CASE WHEN fate = 'python' OR tid_i IS NULL THEN tid END AS tid,
    fate = 'placed' AND (kind IN ('kernel', 'memcpy', 'memset', 'gpu_range')
                         OR (kind = 'sync' AND known.stream IS NOT NULL)) AS gpu,
    tk_int_arg(known.device) AS arg_device,
    tk_int_arg(known.stream) AS arg_stream,
    tk_int_arg(known.correlation) AS correlation,
    -- (struct fields resolve case-insensitively: the legacy spelling goes by JSON path)
    coalesce(tk_int_arg(known."External id"),
             CASE WHEN known IS NOT NULL
                  THEN tk_int_arg(json_extract(args, '$."external id"')) END) AS external_id,
    CASE WHEN fate = 'placed' THEN
        CASE WHEN kind = 'other' AND cat_l <> ''
                 THEN json_merge_patch(CASE WHEN starts_with(args::VARCHAR, '{') THEN args
                                            ELSE '{}' END, json_object('cat', cat))
             WHEN starts_with(args::VARCHAR, '{') AND args::VARCHAR <> '{}' THEN args END
        WHEN fate = 'python' THEN args END AS args,
    CASE WHEN fate = 'python' THEN ph END AS ph,
    CASE WHEN fate = 'python' THEN cat END AS cat,
    CASE WHEN fate = 'python' THEN ts END AS ts,
    CASE WHEN fate = 'python' THEN dur END AS dur
FROM a;

-- @labels (kineto.py runs this only when a pid/tid was not an integer)
CREATE OR REPLACE TEMP TABLE _kineto_labels AS
WITH seen AS (
    SELECT pid AS label, event_id * 2 AS pos FROM _kineto_events
    WHERE pid IS NOT NULL AND pid_i IS NULL
    UNION ALL
    SELECT tid, event_id * 2 + 1 FROM _kineto_events WHERE tid IS NOT NULL AND tid_i IS NULL
)
SELECT label, -row_number() OVER (ORDER BY min(pos)) AS id FROM seen GROUP BY label;

-- @insert: the placed rows. GPU-side rows carry device/stream (from args, else the pid/tid)
-- instead of pid/tid; the host side comes through launch_id at derivation.
INSERT INTO events (trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, pid, tid, device,
                    stream, correlation, external_id, args)
WITH placed AS (
    SELECT t.*, coalesce(t.pid_i, lp.id) AS pid_n, coalesce(t.tid_i, lt.id) AS tid_n
    FROM _kineto_events t
    LEFT JOIN _kineto_labels lp ON lp.label = t.pid
    LEFT JOIN _kineto_labels lt ON lt.label = t.tid
    WHERE t.fate = 'placed'
)
SELECT $trace_id, event_id, kind, name, start_ns, end_ns, end_ns - start_ns,
       CASE WHEN gpu THEN NULL ELSE pid_n END,
       CASE WHEN gpu THEN NULL ELSE tid_n END,
       CASE WHEN gpu THEN TRY_CAST(coalesce(arg_device, pid_n) AS INTEGER) END,
       CASE WHEN gpu THEN coalesce(arg_stream, tid_n) END,
       correlation, external_id, args
FROM placed;
