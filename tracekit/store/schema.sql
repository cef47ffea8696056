-- tracekit normalized store, schema version 6.
-- Every time is integer nanoseconds. Bump SCHEMA_VERSION in tracekit/store/build.py when this changes:
-- caches written under another version are rebuilt, never migrated in place.

CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);

CREATE TABLE IF NOT EXISTS traces (
    trace_id      INTEGER PRIMARY KEY,
    path          VARCHAR NOT NULL,   -- absolute path of the source file as ingested
    format        VARCHAR NOT NULL,   -- 'kineto' | 'nsys'
    tool_version  VARCHAR,            -- e.g. 'nsys 2022.4.2.1', 'torch 2.13.0', 'kineto schema 1'
    host          VARCHAR,
    start_ns      BIGINT,             -- first event start on the trace clock
    duration_ns   BIGINT,             -- last event end - first event start
    devices       JSON,               -- list of GPU device objects (id, name, ...) or []
    file_sha256   VARCHAR,
    ingested_at   TIMESTAMP,
    rank          INTEGER,            -- distributed rank when the trace says so
    clock_offset_ns BIGINT,           -- add to start_ns to get Unix epoch ns, when known
    metadata      JSON,               -- source-specific top-level facts (schemaVersion, nsys meta ...)
    event_count   BIGINT,             -- rows written to events
    skipped_count BIGINT,             -- source records read but not placed in events
    skipped       JSON                -- {reason: count}
);

CREATE TABLE IF NOT EXISTS threads (
    trace_id     INTEGER NOT NULL,
    pid          BIGINT,
    tid          BIGINT,
    process_name VARCHAR,
    thread_name  VARCHAR
);

CREATE TABLE IF NOT EXISTS events (
    trace_id    INTEGER NOT NULL,
    event_id    BIGINT NOT NULL,      -- unique within a trace, 1-based
    kind        VARCHAR NOT NULL,     -- range gpu_range cpu_op python runtime kernel memcpy memset sync osrt mark other
    name        VARCHAR NOT NULL,
    start_ns    BIGINT NOT NULL,
    end_ns      BIGINT NOT NULL,      -- = start_ns for instant events
    dur_ns      BIGINT NOT NULL,
    pid         BIGINT,               -- host process (GPU events: the launching process where known)
    tid         BIGINT,               -- host thread; NULL for GPU events
    device      INTEGER,              -- GPU device index for GPU events
    stream      BIGINT,               -- GPU stream for GPU events
    correlation BIGINT,               -- runtime <-> GPU correlation id (unique per process)
    external_id BIGINT,               -- Kineto 'External id' (links cpu_op <-> runtime/kernel)
    args        JSON,                 -- source-specific fields (shapes, grid, bytes, copy kind ...)
    -- derived after ingest by tracekit/store/derive.sql:
    parent_id   BIGINT,               -- enclosing host event on the same thread
    depth       INTEGER,              -- 0 for top-level host events; NULL for GPU events
    self_ns     BIGINT,               -- dur_ns minus direct children's dur_ns (host events)
    launch_id   BIGINT,               -- GPU events: event_id of the runtime call that launched it
    stage       VARCHAR,              -- stage the event is attributed to (NULL = none)
    request_id  BIGINT,               -- request the event is attributed to (NULL = none)
    launch_op   VARCHAR               -- kernel/memcpy/memset: the host op that launched it
);

CREATE TABLE IF NOT EXISTS stages (
    trace_id   INTEGER NOT NULL,
    request_id BIGINT,                -- NULL when the stage lies outside every request
    stage      VARCHAR NOT NULL,      -- bare name: 'preprocess', not 'tracekit:preprocess'
    start_ns   BIGINT NOT NULL,
    end_ns     BIGINT NOT NULL,
    dur_ns     BIGINT NOT NULL,
    event_id   BIGINT NOT NULL,       -- the range event that defines the stage
    pid        BIGINT,
    tid        BIGINT,
    source     VARCHAR,               -- 'annotated' | 'rule' | 'inferred:<modules|ranges|ops> depth N' | 'inferred:<structure>' (serving_structures.toml)
    parent_stage VARCHAR              -- derived: the stage of the innermost range of another stage
                                      -- on the same thread that contains this one (NULL: none)
);

CREATE TABLE IF NOT EXISTS requests (
    trace_id   INTEGER NOT NULL,
    request_id BIGINT NOT NULL,       -- 1-based, in start order
    start_ns   BIGINT NOT NULL,
    end_ns     BIGINT NOT NULL,
    dur_ns     BIGINT NOT NULL,
    source     VARCHAR NOT NULL,      -- 'tracekit:request' | 'ProfilerStep' | 'structure' | 'stage-sequence' | 'repeated-range' | 'window'
    event_id   BIGINT,                -- the defining range, NULL for stage-sequence and window requests
    pid        BIGINT,
    tid        BIGINT
);

CREATE TABLE IF NOT EXISTS attributes (
    trace_id   INTEGER NOT NULL,
    event_id   BIGINT NOT NULL,       -- the stage/request range the attributes belong to
    key        VARCHAR NOT NULL,
    value      VARCHAR                -- JSON-encoded scalar
);

-- Each GPU device's busy periods, derived at ingest from its kernels, memcpys and memsets (all
-- streams together): the maximal intervals in which at least one of them runs, so the sum of
-- their lengths is the device's busy time, overlaps counted once. The GPU queries read busy
-- time here instead of sorting every activity again.
CREATE TABLE IF NOT EXISTS gpu_islands (
    trace_id       INTEGER NOT NULL,
    device         INTEGER NOT NULL,  -- events.device; -1 when the source names none
    island         BIGINT NOT NULL,   -- 1-based, in start order per device
    start_ns       BIGINT NOT NULL,
    end_ns         BIGINT NOT NULL,
    busy_before_ns BIGINT NOT NULL    -- the device's busy time before start_ns
);

-- Served requests and the batches that served them (tracekit.batch / tracekit.request(id=...)):
-- one row per batch range, and one per (batch, member). Stages inside a batch's interval on its
-- thread belong to each of its requests (queries/serving_requests.sql).
CREATE TABLE IF NOT EXISTS batches (
    trace_id   INTEGER NOT NULL,
    batch_id   BIGINT NOT NULL,       -- 1-based, in start order
    start_ns   BIGINT NOT NULL,
    end_ns     BIGINT NOT NULL,
    dur_ns     BIGINT NOT NULL,
    size       INTEGER NOT NULL,      -- request ids the batch names
    pid        BIGINT,
    tid        BIGINT,
    event_id   BIGINT NOT NULL        -- the tracekit:batch[...] range
);

CREATE TABLE IF NOT EXISTS request_batches (
    trace_id    INTEGER NOT NULL,
    batch_id    BIGINT NOT NULL,
    position    INTEGER NOT NULL,     -- 1-based place of the request in the batch's id list
    request_key VARCHAR NOT NULL,     -- the id given to tracekit.request(id=...) / batch([...])
    request_id  BIGINT                -- requests.request_id whose range carries that id (NULL: none)
);
