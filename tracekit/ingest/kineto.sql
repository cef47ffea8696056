-- Kineto/Chrome trace events → events rows, in SQL: the fast path of tracekit/ingest/kineto.py.
-- Reads the traceEvents array that json_scan.extract_events_array wrote to its own file
-- (@events_json is replaced by that path, quoted), with DuckDB's read_json (C++, all cores).
-- An element over 64 MiB (read_json buffers twice that) makes kineto.py use the Python mapper.
-- Defines:
--   _kineto_raw     temp table: every element as read, event_id = its 1-based position.
--   _kineto_mapped  temp table from it: each element's fate ('placed', 'skipped',
--                   'elsewhere', 'python') and reason under the Python mapper's rules, the
--                   placed ones fully mapped to events' columns; pid_label/tid_label hold
--                   pid/tid text that is not an integer. (Parsing into a table and mapping
--                   from it measured 2.8 s per 1e6 events; the same mapping inside the
--                   read_json query, 4.0 s.)
--   _kineto_rare    temp table: the 'python' rows (metadata, instants, begin/end pairs,
--                   unknown phases) as read, for kineto.py to map. Then _kineto_raw is dropped.
-- Section @placed, run after kineto.py has counted the fates: _kineto_mapped becomes
-- _events_raw, the other rows deleted - the staging table derive.sql reads (it ignores the
-- extra columns).
-- Section @labels, run only when a pid/tid was not an integer: _kineto_labels(label, id) is
-- filled by kineto.py (ids -1, -2, ... by first appearance, pid before tid), then written
-- where the Python mapper puts them.
-- Spliced in: @trace_id (an integer); @kind_case, a CASE over cat_l built from kineto.py's
-- CATEGORY_KINDS (a join to a table of them cost 0.4 s per 1e6 events).

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

CREATE OR REPLACE TEMP TABLE _kineto_raw AS
SELECT ordinality AS event_id, ph, cat, name, pid, tid, ts, dur, args
FROM read_json(@events_json, format = 'array', maximum_object_size = 67108864,
               columns = {ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
                          tid: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE', args: 'JSON'})
     WITH ORDINALITY;

CREATE OR REPLACE TEMP TABLE _kineto_mapped AS
WITH x AS (
    SELECT r.*, lower(coalesce(r.cat, '')) AS cat_l,
           CASE WHEN r.ph = 'X' THEN tk_us_to_ns(r.ts) END AS start_h,
           CASE WHEN r.ph = 'X' THEN tk_us_to_ns(r.dur) END AS dur_h,
           tk_thread_int(r.pid) AS pid_i, tk_thread_int(r.tid) AS tid_i
    FROM _kineto_raw r
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
), m AS (
    SELECT a.*,
        coalesce(fate = 'placed' AND (kind IN ('kernel', 'memcpy', 'memset', 'gpu_range')
                                      OR (kind = 'sync' AND known.stream IS NOT NULL)),
                 false) AS gpu,
        tk_int_arg(known.device) AS arg_device,
        tk_int_arg(known.stream) AS arg_stream
    FROM a
)
-- GPU-side rows carry device/stream (from args, else the pid/tid) instead of pid/tid; the
-- host side comes through launch_id at derivation.
SELECT @trace_id AS trace_id, event_id, fate, reason,
    CASE WHEN fate = 'placed' THEN kind END AS kind,
    CASE WHEN fate = 'placed' THEN coalesce(name, '') WHEN fate = 'python' THEN name END AS name,
    CASE WHEN fate = 'placed' THEN start_h::BIGINT END AS start_ns,
    CASE WHEN fate = 'placed' THEN (start_h + dur_h)::BIGINT END AS end_ns,
    CASE WHEN fate = 'placed' THEN dur_h::BIGINT END AS dur_ns,
    CASE WHEN gpu THEN NULL ELSE pid_i END AS pid,
    CASE WHEN gpu THEN NULL ELSE tid_i END AS tid,
    CASE WHEN gpu THEN TRY_CAST(coalesce(arg_device, pid_i) AS INTEGER) END AS device,
    CASE WHEN gpu THEN coalesce(arg_stream, tid_i) END AS stream,
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
    CASE WHEN pid_i IS NULL THEN pid END AS pid_label,  -- not an integer: a label
    CASE WHEN tid_i IS NULL THEN tid END AS tid_label,
    gpu, arg_device, arg_stream
FROM m;

-- The 'python' rows as read (the same test as the fate's: few rows, one cheap pass).
CREATE OR REPLACE TEMP TABLE _kineto_rare AS
SELECT event_id, ph, cat, name, pid, tid, ts, dur, args
FROM _kineto_raw WHERE ph IS NULL OR ph NOT IN ('X', 's', 't', 'f', 'C');

DROP TABLE _kineto_raw;

-- @placed

DELETE FROM _kineto_mapped WHERE fate <> 'placed';
ALTER TABLE _kineto_mapped RENAME TO _events_raw;

-- @labels
UPDATE _events_raw SET pid = l.id FROM _kineto_labels l
WHERE NOT _events_raw.gpu AND _events_raw.pid IS NULL AND l.label = _events_raw.pid_label;
UPDATE _events_raw SET tid = l.id FROM _kineto_labels l
WHERE NOT _events_raw.gpu AND _events_raw.tid IS NULL AND l.label = _events_raw.tid_label;
UPDATE _events_raw SET device = TRY_CAST(l.id AS INTEGER) FROM _kineto_labels l
WHERE _events_raw.gpu AND _events_raw.arg_device IS NULL AND l.label = _events_raw.pid_label;
UPDATE _events_raw SET stream = l.id FROM _kineto_labels l
WHERE _events_raw.gpu AND _events_raw.arg_stream IS NULL AND l.label = _events_raw.tid_label;
