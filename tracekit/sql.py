"""Named queries: `queries/<name>.sql` files, one block each of the grammar every shipped
.sql file follows (tracekit/sqlfile.py), validated when loaded:

    -- name: stage_summary
    -- returns: one row per stage: stage, count, total_ms, ...
    -- param: $trace_id INTEGER trace to summarize
    -- default: $trace_id 1
    -- Free text lines describe the question.
Parameters are DuckDB `$name` placeholders, bound by the engine, never formatted into the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from tracekit import sqlfile
from tracekit.errors import QueryError
from tracekit.sqlfile import Param

if TYPE_CHECKING:
    import polars as pl

    RunSql = Callable[[str, dict[str, Any] | None], pl.DataFrame]

_TYPES = {"INTEGER": int, "BIGINT": int, "DOUBLE": float, "VARCHAR": str, "BOOLEAN": bool}


@dataclass(frozen=True)
class NamedQuery:
    """A parsed queries/<name>.sql file."""

    name: str
    returns: str
    description: str
    params: tuple[Param, ...]
    text: str
    source: str = field(default="", compare=False)
    per_trace: str = ""  # its `-- per_trace:` line: why it never runs over many traces at once

    def over_traces(self, id_type: str = "INTEGER") -> str | None:
        """This query once for a list of traces, or None (see tracekit.sql.over_traces; None
        also for a query whose header says `-- per_trace:`)."""
        if "trace_id" not in {p.name for p in self.params} or self.per_trace:
            return None
        return over_traces(self.text, id_type)

    def bind(self, values: dict[str, Any]) -> dict[str, Any]:
        """Check and convert parameter values (strings from the CLI are converted)."""
        known = {p.name: p for p in self.params}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise QueryError(
                f"query {self.name}: unknown parameter {unknown[0]!r} "
                f"(known: {', '.join(known) or 'none'})"
            )
        bound: dict[str, Any] = {}
        for p in self.params:
            raw = values.get(p.name, p.default)
            if raw is None:
                raise QueryError(f"query {self.name}: missing parameter {p.name} ({p.description})")
            bound[p.name] = _convert(self.name, p, raw)
        return bound


def _convert(query: str, p: Param, raw: Any) -> Any:
    kind = _TYPES.get(p.type.upper(), str)
    if not isinstance(raw, str) or kind is str:
        return raw
    try:
        if kind is bool:
            if raw.lower() in ("1", "true", "yes"):
                return True
            if raw.lower() in ("0", "false", "no"):
                return False
            raise ValueError(raw)
        return kind(raw)
    except ValueError:
        raise QueryError(
            f"query {query}: parameter {p.name} must be {p.type}, got {raw!r}"
        ) from None


TRACE_IDS = "__tk_trace_ids"  # the list parameter of a query's over_traces form
EACH_TRACE = "__tk_trace"  # its first column: the trace each row belongs to
ROW_IN_TRACE = "__tk_row"  # the row's place in its trace's result (the query's ORDER BY)
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
_LIMIT = re.compile(r"\b(limit|offset)\b", re.IGNORECASE)
_SELECT = re.compile(r"\bselect\b", re.IGNORECASE)
_FROM = re.compile(r"\bfrom\b", re.IGNORECASE)
_SET_OP = re.compile(r"\b(union|except|intersect)\b", re.IGNORECASE)
_DISTINCT = re.compile(r"\s+distinct\b", re.IGNORECASE)
_TRACE_ID_USE = re.compile(r"\$trace_id\b")


ID_TYPES = ("INTEGER", "BIGINT")  # see over_traces


@cache
def over_traces(text: str, id_type: str = "INTEGER") -> str | None:
    """A query over one trace (`$trace_id`) as one statement over many (`$__tk_trace_ids`).

    A report of N traces (the ranks of a job) ran each query N times; its cost is planning,
    ~10-40 ms a statement, whatever the data. This form plans it once: a LATERAL join runs the
    query for each id, its rows prefixed with that id (`__tk_trace`). Each row's place in its
    trace's result is numbered inside, by the query's own final ORDER BY (a row_number()
    added to its last SELECT), and the rows come out ordered by trace, then by that number.
    None where that SELECT is a set operation or DISTINCT (a number would change its rows):
    the caller then runs the query once per trace.

    `id_type` types the ids. DuckDB 1.5 fails to plan some queries' LATERAL form with one of
    INTEGER and BIGINT ("INTERNAL Error: ... inequal types") and plans them with the other:
    the caller tries both (ID_TYPES)."""
    if id_type not in ID_TYPES:
        raise ValueError(f"id_type {id_type!r} is not one of {ID_TYPES}")
    code = _code_only(text).strip().rstrip(";").strip()
    masked, top = _top_level(code)
    orders = [m for m in _ORDER_BY.finditer(masked) if top[m.start()]]
    selects = [m for m in _SELECT.finditer(masked) if top[m.start()]]
    if not orders or not selects or selects[-1].start() > orders[-1].start():
        return None
    last = selects[-1]
    if any(top[m.start()] for m in _SET_OP.finditer(masked)) or _DISTINCT.match(masked, last.end()):
        return None
    frm = next((m for m in _FROM.finditer(masked, last.end()) if top[m.start()]), None)
    # the number goes at the end of the SELECT list: before its FROM, or its ORDER BY
    at = frm.start() if frm is not None and frm.start() < orders[-1].start() else orders[-1].start()
    end = next((m.start() for m in _LIMIT.finditer(masked, orders[-1].end()) if top[m.start()]),
               len(code))  # fmt: skip
    keys = code[orders[-1].end() : end].strip()
    # ORDER BY trace_id orders nothing within a trace (and an aggregate's one row cannot
    # take a window function inside LATERAL)
    number = (
        "1" if re.fullmatch(r"(\w+\.)?trace_id", keys) else f"row_number() OVER (ORDER BY {keys})"
    )
    numbered = f"{code[:at].rstrip()},\n       {number} AS {ROW_IN_TRACE}\n{code[at:]}"
    body = _TRACE_ID_USE.sub("__tk_each.id", numbered)
    return (
        f"SELECT __tk_each.id AS {EACH_TRACE}, __tk_q.* EXCLUDE ({ROW_IN_TRACE})\n"
        f"FROM (SELECT unnest(${TRACE_IDS}::{id_type}[]) AS id) __tk_each,\n"
        f"LATERAL (\n{body}\n) __tk_q\n"
        f"ORDER BY {EACH_TRACE}, __tk_q.{ROW_IN_TRACE}"
    )


def _code_only(sql: str) -> str:
    """`sql` without its comments (string literals kept)."""
    return re.sub(r"'(?:[^']|'')*'|--[^\n]*",
                  lambda m: m.group(0) if m.group(0).startswith("'") else "", sql)  # fmt: skip


def _top_level(code: str) -> tuple[str, list[bool]]:
    """`code` with its string literals blanked (same length, so positions agree), and for
    each position whether it is outside every parenthesis."""
    masked = re.sub(r"'(?:[^']|'')*'", lambda m: "'" + " " * (len(m.group(0)) - 2) + "'", code)
    depth, top = 0, []
    for c in masked:
        depth += (c == "(") - (c == ")")
        top.append(depth == 0)
    return masked, top


def parse_query(text: str, source: str) -> NamedQuery:
    """Parse and validate one query file's text: one block of tracekit/sqlfile.py's grammar,
    with a `-- returns:` line and an ORDER BY (deterministic output)."""
    try:
        parsed = sqlfile.parse(text, source)
    except sqlfile.SqlFileError as e:
        message = str(e).replace("no `-- name:` block", "header lacks '-- name:'")
        raise QueryError(message) from None
    if len(parsed.blocks) != 1:
        raise QueryError(f"{parsed.blocks[1].source}: a query file holds one query")
    block = parsed.blocks[0]
    if not block.returns:
        raise QueryError(f"{block.source}: header lacks '-- returns:'")
    if block.splices:
        raise QueryError(f"{block.source}: queries take $parameters, not @splices")
    if "order by" not in sqlfile.code_only(block.sql).lower():
        raise QueryError(f"{source}: every query needs an ORDER BY (deterministic output)")
    return NamedQuery(block.name, block.returns, block.description, block.params,
                      block.sql, source, block.per_trace)  # fmt: skip


@cache
def all_queries() -> dict[str, NamedQuery]:
    """Every query shipped in tracekit.queries, by name (validated; duplicates are errors)."""
    out: dict[str, NamedQuery] = {}
    folder = files("tracekit.queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        q = parse_query(entry.read_text(), f"queries/{entry.name}")
        if q.name != entry.name[:-4]:
            raise QueryError(f"queries/{entry.name}:1: name {q.name!r} differs from the file name")
        if q.name in out:
            raise QueryError(f"queries/{entry.name}:1: duplicate query name {q.name!r}")
        out[q.name] = q
    return out


def load_query(name: str) -> NamedQuery:
    """The named query, or a QueryError listing what exists."""
    queries = all_queries()
    if name not in queries:
        raise QueryError(f"unknown query {name!r}; `tracekit query --list` shows them")
    return queries[name]


def list_traces(run_sql: RunSql) -> dict[int, str]:
    """trace_id -> path of every trace an engine holds, in trace_id order."""
    listing = run_sql("SELECT trace_id, path FROM traces ORDER BY trace_id", None)
    return {int(i): str(p) for i, p in listing.rows()}


def run_named_query(
    run_sql: RunSql, name: str, params: dict[str, Any], traces: dict[int, str] | None = None
) -> pl.DataFrame:
    """Run a named query through an engine's `sql` (DuckDB or Spark).

    A query over one trace ($trace_id) runs over every trace when no trace_id is given, its
    rows concatenated (each carries its trace_id); an unknown trace_id is an error naming the
    traces there are. `traces` is `list_traces(run_sql)` where the caller keeps it (a Spark
    query costs a job even for this listing); it is read here otherwise."""
    import polars as pl

    q = load_query(name)
    if "trace_id" not in {p.name for p in q.params}:
        return run_sql(q.text, q.bind(params))
    if traces is None:
        traces = list_traces(run_sql)
    if "trace_id" in params:
        wanted = q.bind(params)["trace_id"]
        if wanted not in traces:
            listed = ", ".join(f"{i} ({p.rsplit('/', 1)[-1]})" for i, p in traces.items())
            raise QueryError(
                f"query {name}: no trace with trace_id {wanted}; there are: {listed or 'none'}"
            )
        return run_sql(q.text, q.bind(params))
    frames = [run_sql(q.text, q.bind({**params, "trace_id": i})) for i in traces]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
