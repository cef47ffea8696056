-- Kineto/Chrome trace events → events rows, in SQL: the fast path of tracekit/ingest/kineto.py.
-- kineto.py finds the traceEvents array (in the file, or in an unzipped copy) and cuts it at
-- element boundaries into chunks of 64 MB, each chunk into one part per thread, each part its
-- own JSON array file; DuckDB's read_json (C++) parses a chunk's parts at once, then the
-- chunk is mapped: the parse holds one chunk, not the file, in memory (the whole 1e6-event
-- file took 290 MB). An element over 16 MiB (read_json asks for twice that in one buffer,
-- within the build's memory limit) makes kineto.py use the Python mapper.
-- Blocks (tracekit/sqlfile.py's grammar), run by kineto.py:
--   setup     macros; views over the chunk being read (_kineto_raw, numbered by the view
--             _kineto_rows): _kineto_fated, each element's fate ('placed', 'skipped',
--             'elsewhere', 'python') and reason under the Python mapper's rules, and
--             _kineto_placed, the placed ones mapped to events' columns; the tables the
--             chunks fill:
--             _events_raw       the placed rows - the staging table derive.sql reads.
--             _kineto_rare      the 'python' rows (metadata, instants, begin/end pairs,
--                               unknown phases) as read, for kineto.py to map.
--             _kineto_labelled  placed rows whose pid or tid is a label, not an integer.
--   chunk     parses one chunk into _kineto_raw, from a few files read in parallel
--             (@chunk_files: their list; @offset: the elements before them; event_id =
--             1-based position in traceEvents). read_json reads a file on one thread: two
--             files of 32 MB parsed in 0.09 s, their 64 MB in one file in 0.18 s. Parsing
--             into a table and mapping from it measured 2.8 s per 1e6 events, the mapping
--             inside the read_json query 4.0 s.
--   fates, placed, labelled, rare   run per chunk on _kineto_rows (the last two only
--             when the fates say the chunk has such rows).
--   labels    run only when a pid/tid was not an integer: _kineto_labels(label, id) is filled
--             by kineto.py (ids -1, -2, ... by first appearance, pid before tid), then written
--             where the Python mapper puts them.
-- Spliced in: @trace_id (an integer); @kind_case, a CASE over cat_l built from kineto.py's
-- CATEGORY_KINDS (a join to a table of them cost 0.4 s per 1e6 events).

-- name: setup
-- Macros, the views over the chunk being read, and the tables the chunks fill.
-- splice: @kind_case a CASE over cat_l from kineto.py's CATEGORY_KINDS
-- splice: @trace_id the trace's id (an integer)
-- A pid/tid as an integer when it is one ("4242", "stream 7", 1.5 → 1), else NULL.
CREATE OR REPLACE TEMP MACRO tk_not_min(v) AS CASE WHEN v > -9223372036854775808 THEN v END;
-- (First the common case, an integer as JSON writes it: a cast and back, half a regex's cost.)
CREATE OR REPLACE TEMP MACRO tk_thread_int(v) AS CASE
    WHEN v IS NULL THEN NULL
    WHEN TRY_CAST(v AS BIGINT)::VARCHAR = v THEN tk_not_min(TRY_CAST(v AS BIGINT))
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
-- (Within ±9e15 µs the arithmetic fits BIGINT, which is cheaper than HUGEINT's.)
CREATE OR REPLACE TEMP MACRO tk_us_to_ns(x) AS CASE
    WHEN x < 9.0e15 AND x > -9.0e15
        THEN (trunc(x)::BIGINT * 1000 + round_even((x - trunc(x)) * 1000.0, 0)::BIGINT)::HUGEINT
    WHEN x < 1e20 THEN trunc(x)::HUGEINT * 1000 + round_even((x - trunc(x)) * 1000.0, 0)::HUGEINT
    END;

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
CREATE OR REPLACE TEMP TABLE _kineto_labels (label VARCHAR, id BIGINT);

-- Why a timestamp (µs, as read; h: in ns) cannot place an event, as the Python mapper's
-- _times words it; NULL when it can.
CREATE OR REPLACE TEMP MACRO tk_ts_reason(ts, h) AS CASE
    WHEN ts IS NULL THEN 'missing or non-numeric ts'
    WHEN NOT isfinite(ts) THEN 'non-finite ts'
    WHEN ts < 0 THEN 'negative ts'
    WHEN h IS NULL OR h > 9223372036854775807 THEN 'ts or dur out of range'
    END;
-- A thread's integer: its own, else the id of its label (after @labels' table is filled).
CREATE OR REPLACE TEMP MACRO tk_thread_id(v) AS
    coalesce(tk_thread_int(v), (SELECT id FROM _kineto_labels WHERE label = v));
-- A JSON object as a map, for Python's shallow {**a, **b} (json_merge_patch is recursive).
CREATE OR REPLACE TEMP MACRO tk_json_map(j) AS CASE WHEN json_type(j) = 'OBJECT'
    THEN json_transform(j, '"MAP(VARCHAR, JSON)"') ELSE MAP() END;

-- Each element's fate and reason under the Python mapper's rules, over the chunk that
-- _kineto_raw holds (views: bound again by each statement that reads them).
CREATE OR REPLACE TEMP TABLE _kineto_raw (
    ph VARCHAR, cat VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR, ts DOUBLE, dur DOUBLE,
    args JSON);
CREATE OR REPLACE TEMP VIEW _kineto_rows AS SELECT rowid + 1 AS event_id, * FROM _kineto_raw;
CREATE OR REPLACE TEMP VIEW _kineto_fated AS
WITH x AS (
    SELECT r.*, lower(coalesce(r.cat, '')) AS cat_l,
           tk_thread_int(r.pid) AS pid_i, tk_thread_int(r.tid) AS tid_i,
           -- (whether ts + dur fits int64 ns, for finite non-negative ones: a cheap test
           -- first, the exact one, dearer, only for the rows it does not settle)
           CASE WHEN r.ts + r.dur < 9.0e15 THEN true
                WHEN r.ts >= 0 AND r.dur >= 0
                    THEN coalesce(tk_us_to_ns(r.ts) + tk_us_to_ns(r.dur) <= 9223372036854775807,
                                  false)
                ELSE false END AS fits
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
            WHEN NOT x.fits THEN 'skipped'
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
            WHEN NOT x.fits THEN 'ts or dur out of range'
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
    SELECT f.*, tk_us_to_ns(f.ts) AS start_h, tk_us_to_ns(f.dur) AS dur_h,
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

-- name: chunk
-- splice: @chunk_files the chunk's part files, a list literal
-- splice: @offset the elements before the chunk (an integer)
CREATE OR REPLACE TEMP TABLE _kineto_raw AS
SELECT ph, cat, name, pid, tid, ts, dur, args
FROM read_json(@chunk_files, format = 'array', maximum_object_size = 16777216,
               columns = {ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
                          tid: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE', args: 'JSON'});
-- Parsed with insertion order preserved: the rows are in file order, so the position is the
-- rowid (WITH ORDINALITY would read the files one after the other, on one thread).
CREATE OR REPLACE TEMP VIEW _kineto_rows AS
SELECT rowid + 1 + @offset AS event_id, * FROM _kineto_raw;

-- name: fates
-- (per fate and pid/tid label: a handful of groups)
SELECT fate, reason, pid_label, tid_label, count(*), min(event_id)
FROM _kineto_fated GROUP BY ALL;

-- name: placed
INSERT INTO _events_raw
SELECT trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, pid, tid, device, stream,
       correlation, external_id, args
FROM _kineto_placed;

-- name: labelled
-- (only when the chunk has placed rows with a label)
INSERT INTO _kineto_labelled
SELECT event_id, pid_label, tid_label, gpu, arg_device, arg_stream
FROM _kineto_placed WHERE pid_label IS NOT NULL OR tid_label IS NOT NULL;

-- name: rare
-- (only when the chunk has 'python' rows; the same test as the fate's)
INSERT INTO _kineto_rare
SELECT event_id, ph, cat, name, pid, tid, ts, dur, args
FROM _kineto_rows WHERE ph IS NULL OR ph NOT IN ('X', 's', 't', 'f', 'C');

-- name: labels
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

-- The rare rows (_kineto_rare: metadata, instants, begin/end pairs, unknown phases) are mapped
-- after the last chunk, when the label ids are known, in SQL as the Python mapper maps them.
-- Each section leaves (what, reason, count) groups for kineto.py's counts: what is 'placed',
-- 'skipped' or 'elsewhere'.

-- name: instants
-- splice: @trace_id the trace's id (an integer)
-- (ph i/I/R → kind 'mark', start = end = ts; args gain the category)
CREATE OR REPLACE TEMP TABLE _kineto_instants AS
WITH x AS (
    SELECT r.*, tk_us_to_ns(r.ts) AS start_h, tk_thread_int(r.pid) AS pid_i,
           tk_thread_int(r.tid) AS tid_i
    FROM _kineto_rare r WHERE r.ph IN ('i', 'I', 'R')
)
SELECT x.*, tk_ts_reason(x.ts, x.start_h) AS reason FROM x;
INSERT INTO _events_raw
SELECT @trace_id, event_id, 'mark', coalesce(name, 'None'), start_h::BIGINT, start_h::BIGINT, 0,
    pid_i, tid_i, NULL, NULL, NULL, NULL,
    CASE WHEN coalesce(cat, '') <> ''
             THEN json_merge_patch(CASE WHEN json_type(args) = 'OBJECT' THEN args ELSE '{}' END,
                                   json_object('cat', cat))
         WHEN json_type(args) = 'OBJECT' AND args::VARCHAR <> '{}' THEN args END
FROM _kineto_instants WHERE reason IS NULL;
INSERT INTO _kineto_labelled
SELECT event_id, CASE WHEN pid_i IS NULL THEN pid END, CASE WHEN tid_i IS NULL THEN tid END,
       false, NULL, NULL
FROM _kineto_instants
WHERE reason IS NULL AND ((pid_i IS NULL AND pid IS NOT NULL) OR (tid_i IS NULL AND tid IS NOT NULL));
SELECT CASE WHEN reason IS NULL THEN 'placed' ELSE 'skipped' END, reason, count(*)
FROM _kineto_instants GROUP BY ALL;

-- name: pairs
-- (ph B/E per raw (pid, tid), in file order: an E closes the latest open B, or is
-- skipped when none is open). A stack that ignores pops when empty has, after each event,
-- the depth run - least(0, min(run so far)) (run: the plain running sum of +1/-1); an E is
-- unmatched when the depth before it is 0. A B at depth d is closed by the next matched E at
-- depth d of its thread (depths of one thread alternate B, E at each level). Each pair
-- becomes the complete event ('X') the Python mapper builds: the begin's fields and
-- position, dur = end - begin, args the begin's updated by the end's; it then takes the
-- complete events' fate and mapping (_kineto_rows is pointed at it).
CREATE OR REPLACE TEMP TABLE _kineto_be AS
WITH s AS (
    SELECT event_id, ph, pid, tid, sum(CASE WHEN ph = 'B' THEN 1 ELSE -1 END) OVER w AS run
    FROM _kineto_rare WHERE ph IN ('B', 'E')
    WINDOW w AS (PARTITION BY pid, tid ORDER BY event_id ROWS UNBOUNDED PRECEDING)
), d AS (
    SELECT *, run - least(0, min(run) OVER w) AS depth FROM s
    WINDOW w AS (PARTITION BY pid, tid ORDER BY event_id ROWS UNBOUNDED PRECEDING)
), b AS (
    SELECT *, coalesce(lag(depth) OVER (PARTITION BY pid, tid ORDER BY event_id), 0) AS before
    FROM d
)
SELECT event_id, ph, pid, tid, CASE WHEN ph = 'B' THEN depth ELSE before END AS level,
       ph = 'E' AND before = 0 AS unmatched
FROM b;
CREATE OR REPLACE TEMP TABLE _kineto_pairs AS
WITH m AS (
    SELECT event_id, ph,
           lead(event_id) OVER w AS next_id, lead(ph) OVER w AS next_ph
    FROM _kineto_be WHERE NOT unmatched
    WINDOW w AS (PARTITION BY pid, tid, level ORDER BY event_id)
)
SELECT m.event_id AS begin_id, CASE WHEN m.next_ph = 'E' THEN m.next_id END AS end_id
FROM m WHERE m.ph = 'B';
CREATE OR REPLACE TEMP TABLE _kineto_paired AS
SELECT b.event_id, b.ph, b.cat, b.name, b.pid, b.tid, b.ts, b.dur,
       CASE WHEN json_type(e.args) = 'OBJECT'
            THEN to_json(map_concat(tk_json_map(b.args), tk_json_map(e.args)))::JSON
            ELSE b.args END AS args,
       tk_ts_reason(b.ts, tk_us_to_ns(b.ts)) AS begin_reason,
       tk_ts_reason(e.ts, tk_us_to_ns(e.ts)) AS end_reason,
       (tk_us_to_ns(e.ts) - tk_us_to_ns(b.ts))::DOUBLE / 1000.0 AS pair_dur
FROM _kineto_pairs p
JOIN _kineto_rare b ON b.event_id = p.begin_id
JOIN _kineto_rare e ON e.event_id = p.end_id;
CREATE OR REPLACE TEMP VIEW _kineto_rows AS
SELECT event_id, 'X' AS ph, cat, name, pid, tid, ts, pair_dur AS dur, args
FROM _kineto_paired WHERE begin_reason IS NULL AND end_reason IS NULL;
SELECT 'skipped', 'end without begin', count(*) FROM _kineto_be WHERE unmatched HAVING count(*) > 0
UNION ALL
SELECT 'skipped', 'begin without end', count(*) FROM _kineto_pairs WHERE end_id IS NULL
HAVING count(*) > 0
UNION ALL
SELECT 'skipped', reason, count(*) FROM (
    SELECT begin_reason AS reason FROM _kineto_paired
    UNION ALL SELECT end_reason FROM _kineto_paired
) WHERE reason IS NOT NULL GROUP BY reason;

-- name: metadata
-- (ph M: process_name/thread_name → threads; the label is args.name as Python's str()
-- spells it, NULL here when only Python can (a float, list or object: kineto.py fills it))
CREATE OR REPLACE TEMP TABLE _kineto_meta AS
WITH m AS (
    SELECT event_id, name AS what, tk_thread_id(pid) AS pid_i,
           CASE WHEN name = 'thread_name' THEN tk_thread_id(tid) END AS tid_i,
           CASE WHEN json_type(args) = 'OBJECT' THEN args -> 'name' END AS label_json
    FROM _kineto_rare WHERE ph = 'M' AND name IN ('process_name', 'thread_name')
)
SELECT m.*, CASE coalesce(json_type(label_json), 'NULL')
    WHEN 'VARCHAR' THEN label_json ->> '$'
    WHEN 'BIGINT' THEN label_json::VARCHAR
    WHEN 'UBIGINT' THEN label_json::VARCHAR
    WHEN 'BOOLEAN' THEN CASE WHEN label_json::BOOLEAN THEN 'True' ELSE 'False' END
    WHEN 'NULL' THEN 'None'
    END AS label
FROM m;
SELECT event_id, label_json::VARCHAR FROM _kineto_meta WHERE label IS NULL;

-- name: threads
-- splice: @trace_id the trace's id (an integer)
-- (one row per (pid, tid): a process_name's tid is NULL; the last name of each wins)
INSERT INTO threads
SELECT @trace_id, pid_i, tid_i,
       arg_max(label, event_id) FILTER (WHERE what = 'process_name'),
       arg_max(label, event_id) FILTER (WHERE what = 'thread_name')
FROM _kineto_meta GROUP BY pid_i, tid_i ORDER BY pid_i NULLS FIRST, tid_i NULLS FIRST;
