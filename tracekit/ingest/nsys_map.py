"""The nsys -> events mapping, as INSERT ... SELECT statements run inside DuckDB.

Each source table is read once by one statement straight into the staging table
(tracekit.ingest.common.STAGING_TABLE, which store.derive turns into `events`): no rows pass
through Python, so memory stays bounded by DuckDB's own operators whatever the table size.
event_id is `base + source rowid` (deterministic, no sort): ids are unique and increasing per
table, with gaps where source rows are not events (NVTX domain/category rows, OSRT start/stop
markers).
Optional columns are probed first and read as NULL when a version lacks them; id columns where
old exports wrote 0 for "absent" go through nullif(..., 0).
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb

from tracekit.ingest.common import STAGING_TABLE, EventWriter
from tracekit.ingest.nsys_source import Probe
from tracekit.progress import NO_PROGRESS, Progress
from tracekit.store.literals import execute

PID = "(({g} >> 24) & 16777215)"  # bits 24-47 of a globalTid/globalPid
TID = "nullif({g} & 16777215, 0)"  # bits 0-23; 0 means "the process itself"
STR = "_tk_nsys_str"  # temp copy of StringIds

NVTX_RANGE_TYPES = (59, 60, 70, 71)
NVTX_MARK = 34
NVTX_DOMAIN_CREATE = 75
NVTX_CATEGORY = 33

MEMCPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
# Kineto's cuda_sync names, so both sources name CUPTI synchronization the same way.
SYNC_TYPES = {
    0: "Unknown Sync",
    1: "Event Sync",
    2: "Stream Wait Event",
    3: "Stream Sync",
    4: "Context Sync",
}
EVENT_CLASSES = {0: "runtime", 1: "driver", 13: "egl_driver"}

INSERT = """
INSERT INTO {table} (trace_id, event_id, kind, name, start_ns, end_ns, dur_ns, pid, tid, device,
                    stream, correlation, external_id, args)
"""


def _case(expr: str, mapping: dict[int, str], default: str = "NULL") -> str:
    whens = " ".join(f"WHEN {k} THEN '{v}'" for k, v in mapping.items())
    return f"CASE {expr} {whens} ELSE {default} END"


class Mapper:
    """Runs the per-table statements for one trace against the attached source `alias`."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        alias: str,
        probe: Probe,
        writer: EventWriter,
        rid: str,
        progress: Progress = NO_PROGRESS,
    ) -> None:
        self.con = con
        self.progress = progress
        self.a = alias
        self.p = probe
        self.w = writer
        self.rid = rid  # "rowid" on the sqlite_scanner, "_rid" in the fallback copy
        self.counts: dict[str, int] = {}

    # -- helpers -------------------------------------------------------------------------
    def t(self, table: str) -> str:
        return f'{self.a}."{table}"'

    def c(self, table: str, column: str, alias: str = "s", zero_null: bool = False) -> str:
        """`alias.column` when the table has the column, else NULL."""
        if not self.p.col(table, column):
            return "NULL"
        ref = f'{alias}."{column}"'
        return f"nullif({ref}, 0)" if zero_null else ref

    def _run(self, table: str, build: Callable[[str], str]) -> int:
        """Insert one table's rows with event_id = base + rowid and advance the writer."""
        if not self.p.has(table):
            return 0
        self.progress.step(f"reading {table} ({self.p.rows[table]:,} rows)")
        self.w.flush()
        base = self.w.next_id - 1
        sql = INSERT.format(table=STAGING_TABLE) + build(f"{base} + s.{self.rid}")
        n = execute(self.con, sql, {"trace_id": self.w.trace_id}).fetchone()
        inserted = int(n[0]) if n else 0
        self.w.next_id = base + int(self.p.max_rowid.get(table, 0)) + 1
        self.w.stats.events += inserted
        self.counts[table] = inserted
        return inserted

    def load_strings(self) -> None:
        self.progress.step("reading StringIds")
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE {STR} AS SELECT id, value FROM {self.t('StringIds')}"
        )

    # -- NVTX ----------------------------------------------------------------------------
    def nvtx(self) -> dict[str, int]:
        """Ranges (59/60/70/71) and marks (34); returns counts of flagged ranges."""
        T = "NVTX_EVENTS"
        if not self.p.has(T):
            return {}
        self.progress.step(f"reading {T} ({self.p.rows[T]:,} rows)")
        src = self.t(T)
        text_id = self.c(T, "textId")
        dom_name = f"coalesce(s.text, (SELECT value FROM {STR} WHERE id = {text_id}))"
        payload = ", ".join(
            f"to_json({self.c(T, col)})"
            for col in (
                "int64Value",
                "uint64Value",
                "doubleValue",
                "int32Value",
                "uint32Value",
                "floatValue",
            )
            if self.p.col(T, col)
        )
        json_payload = (
            f"coalesce({self.c(T, 'jsonText')}, "
            f"(SELECT value FROM {STR} WHERE id = {self.c(T, 'jsonTextId')}))"
        )
        types = ", ".join(str(x) for x in (*NVTX_RANGE_TYPES, NVTX_MARK))
        g = 's."globalTid"'
        # nsys's rule for a NULL end: the largest timestamp in NVTX_EVENTS (nvtxsum, 2022.4).
        self.con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _tk_nvtx_meta AS
            SELECT greatest(max(start), max("end")) AS maxts FROM {src}
            """
        )
        # A domain's name comes from its create row in the same process (earliest one).
        self.con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _tk_nvtx_dom AS
            SELECT {PID.format(g=g)} AS p, s."domainId" AS id, arg_min({dom_name}, s.start) AS name
            FROM {src} s WHERE s."eventType" = {NVTX_DOMAIN_CREATE} GROUP BY 1, 2
            """
        )
        self.con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _tk_nvtx_cat AS
            SELECT {PID.format(g=g)} AS p, s."domainId" AS dom, s.category AS id,
                   arg_min({dom_name}, s.start) AS name
            FROM {src} s WHERE s."eventType" = {NVTX_CATEGORY} GROUP BY 1, 2, 3
            """
        )
        msg = f"coalesce(sid.value, {self.c(T, 'text')})"
        is_mark = f's."eventType" = {NVTX_MARK}'
        end = f'CASE WHEN {is_mark} THEN s.start ELSE coalesce(s."end", m.maxts) END'
        end_tid = (
            'CASE WHEN s."endGlobalTid" IS NOT NULL THEN s."endGlobalTid" & 16777215 END'
            if self.p.col(T, "endGlobalTid")
            else "NULL"
        )
        style = _case(
            's."eventType"', {59: "PushPop", 60: "StartEnd", 70: "PushPop", 71: "StartEnd"}
        )

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid},
                   CASE WHEN {is_mark} THEN 'mark' ELSE 'range' END,
                   CASE WHEN d.name IS NOT NULL THEN d.name || ':' || coalesce({msg}, '')
                        ELSE coalesce({msg}, '') END,
                   s.start, {end}, {end} - s.start,
                   {PID.format(g=g)}, {TID.format(g=g)}, NULL, NULL, NULL, NULL,
                   json_merge_patch('{{}}', json_object(
                       'style', {style},
                       'domain', d.name,
                       'category', coalesce(c.name, CAST(nullif(s.category, 0) AS VARCHAR)),
                       'color', {self.c(T, "color")},
                       'rangeId', {self.c(T, "rangeId", zero_null=True)},
                       'endTid', {end_tid},
                       'payload', {f"coalesce({payload})" if payload else "NULL"},
                       'jsonPayload', {json_payload},
                       'incomplete', CASE WHEN s."end" IS NULL AND NOT {is_mark} THEN true END
                   ))
            FROM {src} s
            CROSS JOIN _tk_nvtx_meta m
            LEFT JOIN {STR} sid ON sid.id = {text_id}
            LEFT JOIN _tk_nvtx_dom d ON d.id = s."domainId" AND d.p = {PID.format(g=g)}
            LEFT JOIN _tk_nvtx_cat c ON c.id = s.category AND c.p = {PID.format(g=g)}
                                     AND c.dom IS NOT DISTINCT FROM s."domainId"
            WHERE s."eventType" IN ({types})
            """

        self._run(T, build)
        other = self.con.execute(
            f"""
            SELECT count(*) FILTER (WHERE "eventType" NOT IN ({types})),
                   count(*) FILTER (WHERE "eventType" IN {NVTX_RANGE_TYPES} AND "end" IS NULL)
            FROM {src}
            """
        ).fetchone()
        assert other is not None
        if other[0]:
            # Domain/category/thread-name rows: used for names, not events of their own.
            self.w.stats.elsewhere["nvtx domain/category/naming rows"] += int(other[0])
        return {"incomplete": int(other[1])}

    # -- CUDA API ------------------------------------------------------------------------
    def runtime(self, table: str = "CUPTI_ACTIVITY_KIND_RUNTIME") -> int:
        """Runtime and driver API calls; the `_vNNNN` suffix is cut as cudaapisum does."""
        g = 's."globalTid"'
        raw = "sid.value"
        name = (
            f"CASE WHEN substr({raw}, -6, 2) = '_v' THEN substr({raw}, 1, length({raw}) - 6) "
            f"ELSE coalesce({raw}, '(unknown API)') END"
        )
        cls = self.c(table, "eventClass")
        api = _case(cls, EVENT_CLASSES, f"CAST({cls} AS VARCHAR)")

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'runtime', {name}, s.start, s."end", s."end" - s.start,
                   {PID.format(g=g)}, {TID.format(g=g)}, NULL, NULL,
                   {self.c(table, "correlationId", zero_null=True)}, NULL,
                   json_object('api', {api}, 'rawName', {raw},
                               'returnValue', {self.c(table, "returnValue")})
            FROM {self.t(table)} s LEFT JOIN {STR} sid ON sid.id = s."nameId"
            """

        return self._run(table, build)

    # -- GPU activity --------------------------------------------------------------------
    def _gpu_cols(self, table: str) -> str:
        g = 's."globalPid"'
        return f"""{PID.format(g=g)}, NULL, s."deviceId", s."streamId",
                   {self.c(table, "correlationId", zero_null=True)}, NULL"""

    def kernels(self) -> int:
        T = "CUPTI_ACTIVITY_KIND_KERNEL"
        c = self.c

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'kernel',
                   coalesce(dn.value, sn.value, '(unknown kernel)'),
                   s.start, s."end", s."end" - s.start, {self._gpu_cols(T)},
                   json_object(
                       'shortName', sn.value, 'mangledName', mn.value,
                       'grid', [{c(T, "gridX")}, {c(T, "gridY")}, {c(T, "gridZ")}],
                       'block', [{c(T, "blockX")}, {c(T, "blockY")}, {c(T, "blockZ")}],
                       'registersPerThread', {c(T, "registersPerThread")},
                       'staticSharedMemory', {c(T, "staticSharedMemory")},
                       'dynamicSharedMemory', {c(T, "dynamicSharedMemory")},
                       'localMemoryTotal', {c(T, "localMemoryTotal")},
                       'contextId', {c(T, "contextId")},
                       'greenContextId', {c(T, "greenContextId", zero_null=True)},
                       'graphNodeId', {c(T, "graphNodeId", zero_null=True)},
                       'graphId', {c(T, "graphId", zero_null=True)},
                       'launchType', {c(T, "launchType")})
            FROM {self.t(T)} s
            LEFT JOIN {STR} dn ON dn.id = {c(T, "demangledName")}
            LEFT JOIN {STR} sn ON sn.id = {c(T, "shortName")}
            LEFT JOIN {STR} mn ON mn.id = {c(T, "mangledName", zero_null=True)}
            """

        return self._run(T, build)

    def memcpy(self) -> int:
        T = "CUPTI_ACTIVITY_KIND_MEMCPY"
        c = self.c
        kind = _case('s."copyKind"', MEMCPY_KINDS, "'Unknown'")
        # nsys's own labels (gpumemtimesum): '[CUDA memcpy HtoD]', UVM ones named apart.
        name = (
            f'CASE WHEN s."copyKind" BETWEEN 11 AND 13 '
            f"THEN '[CUDA Unified Memory memcpy ' || {kind} || ']' "
            f"ELSE '[CUDA memcpy ' || {kind} || ']' END"
        )

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'memcpy', {name}, s.start, s."end", s."end" - s.start,
                   {self._gpu_cols(T)},
                   json_object('bytes', {c(T, "bytes")}, 'copyKind', {kind},
                               'srcKind', {_case(c(T, "srcKind"), MEM_KINDS)},
                               'dstKind', {_case(c(T, "dstKind"), MEM_KINDS)},
                               'srcDeviceId', {c(T, "srcDeviceId")},
                               'dstDeviceId', {c(T, "dstDeviceId")},
                               'contextId', {c(T, "contextId")},
                               'graphNodeId', {c(T, "graphNodeId", zero_null=True)},
                               'copyCount', {c(T, "copyCount")})
            FROM {self.t(T)} s
            """

        return self._run(T, build)

    def memset(self) -> int:
        T = "CUPTI_ACTIVITY_KIND_MEMSET"
        c = self.c

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'memset', '[CUDA memset]', s.start, s."end",
                   s."end" - s.start, {self._gpu_cols(T)},
                   json_object('bytes', {c(T, "bytes")}, 'value', {c(T, "value")},
                               'memKind', {_case(c(T, "memKind"), MEM_KINDS)},
                               'contextId', {c(T, "contextId")},
                               'graphNodeId', {c(T, "graphNodeId", zero_null=True)})
            FROM {self.t(T)} s
            """

        return self._run(T, build)

    def sync(self) -> int:
        T = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        c = self.c
        st = c(T, "syncType")

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'sync', {_case(st, SYNC_TYPES, "'Unknown Sync'")},
                   s.start, s."end", s."end" - s.start, {self._gpu_cols(T)},
                   json_object('syncType', {st}, 'contextId', {c(T, "contextId")},
                               'eventId', {c(T, "eventId")})
            FROM {self.t(T)} s
            """

        return self._run(T, build)

    def memory(self) -> int:
        """CUDA memory usage (nsys --cuda-memory-usage=true): one `[memory]` mark per
        allocation or free, shaped like torch.profiler's allocator instants (`Bytes` negative
        for a free; `Device Id` -1 for pinned or pageable host memory) so memory_peaks reads
        both. nsys records no allocator totals: the queries take the running sum."""
        T = "CUDA_GPU_MEMORY_USAGE_EVENTS"
        g = 's."globalPid"'
        kind = 's."memKind"'
        signed = 'CASE WHEN s."memoryOperationType" = 1 THEN -s.bytes ELSE s.bytes END'

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'mark', '[memory]', s.start, s.start, 0,
                   {PID.format(g=g)}, NULL, NULL, NULL,
                   {self.c(T, "correlationId", zero_null=True)}, NULL,
                   json_object('Bytes', {signed},
                               'Device Id', CASE WHEN {kind} IN (0, 1) THEN -1
                                                 ELSE s."deviceId" END,
                               'Addr', s.address, 'memKind', {_case(kind, MEM_KINDS)},
                               'name', {self.c(T, "name")}, 'source', 'nsys')
            FROM {self.t(T)} s
            """

        return self._run(T, build)

    # -- OS runtime ----------------------------------------------------------------------
    def osrt(self) -> int:
        T = "OSRT_API"
        if not self.p.has(T):
            return 0
        g = 's."globalTid"'
        cls = self.c(T, "eventClass")

        def build(eid: str) -> str:
            return f"""
            SELECT $trace_id, {eid}, 'osrt', coalesce(sid.value, '(unknown)'), s.start, s."end",
                   s."end" - s.start, {PID.format(g=g)}, {TID.format(g=g)}, NULL, NULL, NULL,
                   NULL,
                   json_object('returnValue', {self.c(T, "returnValue")},
                               'nestingLevel', {self.c(T, "nestingLevel")})
            FROM {self.t(T)} s LEFT JOIN {STR} sid ON sid.id = s."nameId"
            WHERE {cls} IS NULL OR {cls} NOT IN (31, 32)
            """

        n = self._run(T, build)
        markers = self.p.rows[T] - n
        if markers:
            # Zero-length "profiling started/finished" markers (classes 31/32), as osrtsum.
            self.w.skip("osrt start/finish marker", markers)
        return n

    # -- threads -------------------------------------------------------------------------
    def threads(self) -> None:
        """Process rows (tid NULL) and thread rows for the processes that have events."""
        pn = "SELECT NULL::BIGINT AS pid, NULL::VARCHAR AS name WHERE false"
        if self.p.has("PROCESSES"):
            pn = f"""SELECT ("globalPid" >> 24) & 16777215 AS pid, arg_max(name, "globalPid")
                       AS name FROM {self.t("PROCESSES")} GROUP BY 1"""
        tn = "SELECT NULL::BIGINT AS pid, NULL::BIGINT AS tid, NULL::VARCHAR AS name WHERE false"
        if self.p.has("ThreadNames"):
            # A thread renamed during the run has several rows: the last one wins.
            tn = f"""SELECT (t."globalTid" >> 24) & 16777215 AS pid, t."globalTid" & 16777215
                       AS tid, arg_max(sid.value, t.{self.rid}) AS name
                     FROM {self.t("ThreadNames")} t JOIN {STR} sid ON sid.id = t."nameId"
                     GROUP BY 1, 2"""
        execute(
            self.con,
            f"""
            INSERT INTO threads
            WITH used AS (
                SELECT DISTINCT pid, tid FROM {STAGING_TABLE}
                WHERE trace_id = $trace_id AND pid IS NOT NULL
            ), procs AS (SELECT DISTINCT pid FROM used),
            pn AS ({pn}), tn AS ({tn}),
            th AS (
                SELECT pid, tid FROM used WHERE tid IS NOT NULL
                UNION SELECT pid, tid FROM tn WHERE pid IN (SELECT pid FROM procs) AND tid <> 0
            )
            SELECT $trace_id, p.pid, NULL, pn.name, NULL
            FROM procs p LEFT JOIN pn USING (pid)
            UNION ALL
            SELECT $trace_id, th.pid, th.tid, pn.name, tn.name
            FROM th LEFT JOIN pn USING (pid) LEFT JOIN tn USING (pid, tid)
            ORDER BY 2, 3 NULLS FIRST
            """,
            {"trace_id": self.w.trace_id},
        )
