-- Kineto/Chrome trace events → events rows, in SQL: the fast path of tracekit/ingest/kineto.py.
-- kineto.py finds the traceEvents array (in the file, or in an unzipped copy) and cuts it at
-- element boundaries into chunks of 64 MB, each chunk into one part per thread, each part its
-- own JSON array file; DuckDB's read_json (C++) parses a chunk's parts at once, then the
-- chunk is mapped: the parse holds one chunk, not the file, in memory (the whole 1e6-event
-- file took 290 MB). An element over 16 MiB (read_json asks for twice that in one buffer,
-- within the build's memory limit) makes kineto.py use the Python mapper.
-- Sections, split by kineto.py at the `-- @name` lines:
--   (first)   macros; views over the chunk being read (_kineto_raw, numbered by the view
--             _kineto_rows): _kineto_fated, each element's fate ('placed', 'skipped',
--             'elsewhere', 'python') and reason under the Python mapper's rules, and
--             _kineto_placed, the placed ones mapped to events' columns; the tables the
--             chunks fill:
--             _events_raw       the placed rows - the staging table derive.sql reads.
--             _kineto_rare      the 'python' rows (metadata, instants, begin/end pairs,
--                               unknown phases) as read, for kineto.py to map.
--             _kineto_labelled  placed rows whose pid or tid is a label, not an integer.
--   @chunk    parses one chunk into _kineto_raw, from a few files read in parallel
--             (@chunk_files: their list; @offset: the elements before them; event_id =
--             1-based position in traceEvents). read_json reads a file on one thread: two
--             files of 32 MB parsed in 0.09 s, their 64 MB in one file in 0.18 s. Parsing
--             into a table and mapping from it measured 2.8 s per 1e6 events, the mapping
--             inside the read_json query 4.0 s.
--   @fates, @placed, @labelled, @rare   run per chunk on _kineto_rows (the last two only
--             when the fates say the chunk has such rows).
--   @labels   run only when a pid/tid was not an integer: _kineto_labels(label, id) is filled
--             by kineto.py (ids -1, -2, ... by first appearance, pid before tid), then written
--             where the Python mapper puts them.
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

CREATE OR REPLACE TEMP TABLE _events_raw (
    trace_id INTEGER, event_id BIGINT, kind VARCHAR, name VARCHAR, start_ns BIGINT,
    end_ns BIGINT, dur_ns BIGINT, pid BIGINT, tid BIGINT, device INTEGER, stream BIGINT,
    correlation BIGINT, external_id BIGINT, args JSON);
CREATE OR REPLACE TEMP TABLE _kineto_labelled (
    event_id BIGINT, pid_label VARCHAR, tid_label VARCHAR, gpu BOOLEAN, arg_device BIGINT,
    arg_stream BIGINT);
CREATE OR REPLACE TEMP TABLE _kineto_rare (
    event_id BIGINT, ph VARCHAR, cat VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR,
    ts DOUBLE, dur DOUBLE, args JSON);

-- Each element's fate and reason under the Python mapper's rules, over the chunk that
-- _kineto_raw holds (views: bound again by each statement that reads them).
CREATE OR REPLACE TEMP TABLE _kineto_raw (
    ph VARCHAR, cat VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR, ts DOUBLE, dur DOUBLE,
    args JSON);
CREATE OR REPLACE TEMP VIEW _kineto_rows AS SELECT rowid + 1 AS event_id, * FROM _kineto_raw;
CREATE OR REPLACE TEMP VIEW _kineto_fated AS
WITH x AS (
    SELECT r.*, lower(coalesce(r.cat, '')) AS cat_l,
           CASE WHEN r.ph = 'X' THEN tk_us_to_ns(r.ts) END AS start_h,
           CASE WHEN r.ph = 'X' THEN tk_us_to_ns(r.dur) END AS dur_h,
           tk_thread_int(r.pid) AS pid_i, tk_thread_int(r.tid) AS tid_i
    FROM _kineto_rows r
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
)
SELECT f.*,
    CASE WHEN pid_i IS NULL THEN pid END AS pid_label,  -- not an integer: a label
    CASE WHEN tid_i IS NULL THEN tid END AS tid_label
FROM f;

-- The placed rows of the chunk, mapped to events' columns. GPU-side rows carry device/stream
-- (from args, else the pid/tid) instead of pid/tid; the host side comes through launch_id at
-- derivation. pid_label/tid_label, gpu, arg_device and arg_stream are for @labels.
CREATE OR REPLACE TEMP VIEW _kineto_placed AS
WITH a AS (
    SELECT f.*,
        CASE WHEN starts_with(f.args::VARCHAR, '{')
             THEN json_transform(f.args, '{"device": "JSON", "stream": "JSON", "correlation": "JSON",
                                          "External id": "JSON"}')
        END AS known
    FROM _kineto_fated f WHERE fate = 'placed'
), m AS (
    SELECT a.*,
        coalesce(kind IN ('kernel', 'memcpy', 'memset', 'gpu_range')
                 OR (kind = 'sync' AND known.stream IS NOT NULL), false) AS gpu,
        tk_int_arg(known.device) AS arg_device,
        tk_int_arg(known.stream) AS arg_stream
    FROM a
)
SELECT @trace_id AS trace_id, event_id, kind, coalesce(name, '') AS name,
    start_h::BIGINT AS start_ns, (start_h + dur_h)::BIGINT AS end_ns, dur_h::BIGINT AS dur_ns,
    CASE WHEN gpu THEN NULL ELSE pid_i END AS pid,
    CASE WHEN gpu THEN NULL ELSE tid_i END AS tid,
    CASE WHEN gpu THEN TRY_CAST(coalesce(arg_device, pid_i) AS INTEGER) END AS device,
    CASE WHEN gpu THEN coalesce(arg_stream, tid_i) END AS stream,
    tk_int_arg(known.correlation) AS correlation,
    -- (struct fields resolve case-insensitively: the legacy spelling goes by JSON path)
    coalesce(tk_int_arg(known."External id"),
             CASE WHEN known IS NOT NULL
                  THEN tk_int_arg(json_extract(args, '$."external id"')) END) AS external_id,
    CASE WHEN kind = 'other' AND cat_l <> ''
             THEN json_merge_patch(CASE WHEN starts_with(args::VARCHAR, '{') THEN args
                                        ELSE '{}' END, json_object('cat', cat))
         WHEN starts_with(args::VARCHAR, '{') AND args::VARCHAR <> '{}' THEN args END AS args,
    pid_label, tid_label, gpu, arg_device, arg_stream
FROM m;

-- @chunk
CREATE OR REPLACE TEMP TABLE _kineto_raw AS
SELECT ph, cat, name, pid, tid, ts, dur, args
FROM read_json(@chunk_files, format = 'array', maximum_object_size = 16777216,
               columns = {ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
                          tid: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE', args: 'JSON'});
-- Parsed with insertion order preserved: the rows are in file order, so the position is the
-- rowid (WITH ORDINALITY would read the files one after the other, on one thread).
CREATE OR REPLACE TEMP VIEW _kineto_rows AS
SELECT rowid + 1 + @offset AS event_id, * FROM _kineto_raw;

-- @fates (per fate and pid/tid label: a handful of groups)
SELECT fate, reason, pid_label, tid_label, count(*), min(event_id)
FROM _kineto_fated GROUP BY ALL;

-- @placed
INSERT INTO _events_raw
SELECT trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, pid, tid, device, stream,
       correlation, external_id, args
FROM _kineto_placed;

-- @labelled (only when the chunk has placed rows with a label)
INSERT INTO _kineto_labelled
SELECT event_id, pid_label, tid_label, gpu, arg_device, arg_stream
FROM _kineto_placed WHERE pid_label IS NOT NULL OR tid_label IS NOT NULL;

-- @rare (only when the chunk has 'python' rows; the same test as the fate's)
INSERT INTO _kineto_rare
SELECT event_id, ph, cat, name, pid, tid, ts, dur, args
FROM _kineto_rows WHERE ph IS NULL OR ph NOT IN ('X', 's', 't', 'f', 'C');

-- @labels
CREATE OR REPLACE TEMP TABLE _kineto_relabel AS
SELECT b.event_id,
       CASE WHEN NOT b.gpu THEN p.id END AS pid, CASE WHEN NOT b.gpu THEN t.id END AS tid,
       CASE WHEN b.gpu AND b.arg_device IS NULL THEN TRY_CAST(p.id AS INTEGER) END AS device,
       CASE WHEN b.gpu AND b.arg_stream IS NULL THEN t.id END AS stream
FROM _kineto_labelled b
LEFT JOIN _kineto_labels p ON p.label = b.pid_label
LEFT JOIN _kineto_labels t ON t.label = b.tid_label;
UPDATE _events_raw
SET pid = coalesce(l.pid, _events_raw.pid), tid = coalesce(l.tid, _events_raw.tid),
    device = coalesce(l.device, _events_raw.device),
    stream = coalesce(l.stream, _events_raw.stream)
FROM _kineto_relabel l WHERE _events_raw.event_id = l.event_id;
