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
                      block.sql, source)  # fmt: skip


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


def run_named_query(run_sql: RunSql, name: str, params: dict[str, Any]) -> pl.DataFrame:
    """Run a named query through an engine's `sql` (DuckDB or Spark).

    A query over one trace ($trace_id) runs over every trace when no trace_id is given, its
    rows concatenated (each carries its trace_id); an unknown trace_id is an error naming the
    traces there are."""
    import polars as pl

    q = load_query(name)
    if "trace_id" not in {p.name for p in q.params}:
        return run_sql(q.text, q.bind(params))
    listing = run_sql("SELECT trace_id, path FROM traces ORDER BY trace_id", None)
    traces = {int(i): str(p) for i, p in listing.rows()}
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
