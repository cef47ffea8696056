"""The catalogue's DuckDB SQL as Spark SQL: sqlglot's transpiler plus a few rules of ours.

sqlglot reads the DuckDB text and writes Spark SQL (`$name` parameters become Spark's named
`:name` markers, `->>` becomes get_json_object, `arg_min` min_by, `regexp_matches` RLIKE,
DuckDB's NULLS LAST default is written out ...). What it leaves for us, as AST rewrites:

- `quantile_cont(x, q)` / `median(x)`: Spark's exact `percentile(x, q)` (linear interpolation,
  the same definition as DuckDB's quantile_cont), or `percentile_approx(x, q, 10000)` when
  asked for approximate percentiles (docs/export.md says how close those are).
- `WITH x AS [NOT] MATERIALIZED`: a DuckDB planner hint Spark does not parse; dropped.
- `to_json(scalar)`: Spark's to_json takes only structs, arrays and maps, so the scalar is
  wrapped in a one-element array and the brackets are cut off again.
- `CAST(x AS JSON[])`: `from_json(x, 'ARRAY<STRING>')`, each element's JSON text.
- `HUGEINT`: `DECIMAL(38, 0)` (Spark has no 128-bit integer).

Anything else the catalogue needs is written portably in the query itself (docs/export.md).
"""

from __future__ import annotations

from functools import cache

from tracekit.errors import TracekitError

try:
    import sqlglot
    from sqlglot import exp
except ImportError:  # pragma: no cover - the spark extra is missing
    raise TracekitError(
        "--engine spark needs the spark extra: pip install 'tracekit-profiler[spark]' (sqlglot)"
    ) from None

APPROX_ACCURACY = 10000  # percentile_approx's accuracy: rank error at most n / 10000


def to_spark(sql: str, approx_percentiles: bool = False, pretty: bool = False) -> str:
    """Spark SQL for DuckDB SQL: a statement of the catalogue or a user's ad-hoc query."""
    return _to_spark(sql, approx_percentiles, pretty)


@cache
def _to_spark(sql: str, approx_percentiles: bool, pretty: bool) -> str:
    statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    out = []
    for tree in statements:
        tree = tree.transform(lambda node: _rewrite(node, approx_percentiles))
        out.append(tree.sql(dialect="spark", pretty=pretty))
    return ";\n".join(out)


def _percentile(value: exp.Expression, q: exp.Expression, approx: bool) -> exp.Expression:
    if approx:
        return exp.Anonymous(
            this="percentile_approx",
            expressions=[value, q, exp.Literal.number(APPROX_ACCURACY)],
        )
    return exp.Anonymous(this="percentile", expressions=[value, q])


def _rewrite(node: exp.Expression, approx: bool) -> exp.Expression:
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        return _percentile(node.this.copy(), node.expression.copy(), approx)
    if isinstance(node, exp.Median):
        return _percentile(node.this.copy(), exp.Literal.number(0.5), approx)
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)  # in place: a new node's children are not visited
        return node
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "to_json":
        if len(node.expressions) == 1:
            wrapped = exp.Anonymous(
                this="to_json", expressions=[exp.Array(expressions=[node.expressions[0].copy()])]
            )
            length = exp.Anonymous(this="length", expressions=[wrapped.copy()])
            return exp.Substring(
                this=wrapped, start=exp.Literal.number(2), length=exp.Sub(
                    this=length, expression=exp.Literal.number(2)
                )
            )  # fmt: skip
    if isinstance(node, exp.Cast) and _is_json_array(node.to):
        return exp.Anonymous(
            this="from_json", expressions=[node.this.copy(), exp.Literal.string("ARRAY<STRING>")]
        )
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("DECIMAL(38, 0)")
    return node


def _is_json_array(to: exp.DataType) -> bool:
    return (
        to.this == exp.DataType.Type.ARRAY
        and len(to.expressions) == 1
        and isinstance(to.expressions[0], exp.DataType)
        and to.expressions[0].this == exp.DataType.Type.JSON
    )
