"""The catalogue's DuckDB SQL as Spark SQL: tracekit's macros expanded, then sqlglot's
transpiler plus a few rules of ours.

Macros first. The catalogue calls the DuckDB macros of tracekit/macros.sql, which Spark does
not have. That file stays their one definition: it is parsed with sqlglot (DuckDB dialect)
and every call is expanded in the query's tree before transpiling, repeatedly, since macros
call macros:

- a scalar macro call (`tk_op_name(p.name)`) becomes its body, in parentheses, with each
  parameter replaced by the argument's expression;
- a table macro in FROM or JOIN (`FROM tk_union_ns('iv')`, `tk_gpu_activity($trace_id) g`)
  becomes a subquery of its body, aliased as the call was (else by the macro's name), with
  `query_table(param)` replaced by the table or CTE the argument names and every other
  parameter by the argument. The body's own CTEs are renamed `<macro>_<n>__<cte>` (n counts
  the calls; a reference keeps the old name as its alias): sqlglot's Spark writer hoists
  nested CTEs into the statement's one WITH, where two calls' `o` would clash.

The `tk_category_rules` table the macros read is a Spark temp view filled by tracekit.spark
from the same rules (tracekit.categories).

Then sqlglot reads the DuckDB text and writes Spark SQL (`$name` parameters become Spark's named
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
- `regexp_matches(x, p, 'i')`: `x RLIKE concat('(?i)', p)` (sqlglot drops the flag).

Anything else the catalogue needs is written portably in the query itself (docs/export.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from tracekit.categories import macros_sql
from tracekit.errors import QueryError, TracekitError

try:
    import sqlglot
    from sqlglot import exp
except ImportError:  # pragma: no cover - the spark extra is missing
    raise TracekitError(
        "--engine spark needs the spark extra: pip install 'tracekit-profiler[spark]' (sqlglot)"
    ) from None

APPROX_ACCURACY = 10000  # percentile_approx's accuracy: rank error at most n / 10000
MAX_MACRO_DEPTH = 16  # expansion rounds (macros calling macros) before giving up


def to_spark(sql: str, approx_percentiles: bool = False, pretty: bool = False) -> str:
    """Spark SQL for DuckDB SQL: a statement of the catalogue or a user's ad-hoc query."""
    return _to_spark(sql, approx_percentiles, pretty)


@cache
def _to_spark(sql: str, approx_percentiles: bool, pretty: bool) -> str:
    statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    out = []
    for tree in statements:
        tree = expand_macros(tree)
        tree = tree.transform(lambda node: _rewrite(node, approx_percentiles))
        out.append(tree.sql(dialect="spark", pretty=pretty))
    return ";\n".join(out)


@dataclass(frozen=True)
class Macro:
    """One macro of tracekit/macros.sql: its parameters and its parsed body (a query for a
    table macro, an expression for a scalar one)."""

    name: str
    params: tuple[str, ...]
    body: exp.Expression
    table: bool


@cache
def macros() -> dict[str, Macro]:
    """tracekit/macros.sql's macros by (lower-case) name."""
    out: dict[str, Macro] = {}
    for stmt in sqlglot.parse(macros_sql(), read="duckdb"):
        if not isinstance(stmt, exp.Create) or str(stmt.args.get("kind")).upper() != "MACRO":
            continue  # the CREATE TEMP TABLE of the category rules
        udf = stmt.this
        assert isinstance(udf, exp.UserDefinedFunction), udf
        name = udf.this.name.lower()
        params = tuple(p.name.lower() for p in udf.expressions)
        body = stmt.expression
        assert body is not None, name
        table = isinstance(body, exp.Query)
        if not table and isinstance(body, exp.Paren):
            body = body.this
        out[name] = Macro(name, params, body, table)
    return out


def _rename_ctes(body: exp.Expression, prefix: str) -> exp.Expression:
    """The body's CTEs as `<prefix>__<cte>`; a reference keeps the old name as its alias."""
    with_ = body.args.get("with_") or body.args.get("with")
    if not isinstance(with_, exp.With):
        return body
    names = {cte.alias_or_name.lower() for cte in with_.expressions}

    def rename(node: exp.Expression) -> exp.Expression:
        # a CTE named by string to a nested table macro (tk_union_ns('iv')) follows its CTE
        if (
            isinstance(node, exp.Literal)
            and node.is_string
            and isinstance(node.parent, exp.Anonymous)
            and node.this.lower() in names
        ):
            return exp.Literal.string(f"{prefix}__{node.this}")
        if isinstance(node, exp.TableAlias) and isinstance(node.parent, exp.CTE):
            if node.name.lower() in names:
                return exp.TableAlias(this=exp.to_identifier(f"{prefix}__{node.name}"))
        if (
            isinstance(node, exp.Table)
            and isinstance(node.this, exp.Identifier)
            and not node.db
            and node.name.lower() in names
        ):
            return exp.Table(
                this=exp.to_identifier(f"{prefix}__{node.name}"),
                alias=node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(node.name)),
            )
        return node

    return body.transform(rename)


def expand_macros(tree: exp.Expression) -> exp.Expression:
    """`tree` with every call of a tracekit macro replaced by the macro's body."""
    defs = macros()
    counter = itertools.count(1)
    for _ in range(MAX_MACRO_DEPTH):
        calls = [
            n for n in tree.find_all(exp.Anonymous) if str(n.this).lower() in defs
        ]  # fmt: skip
        if not calls:
            return tree
        tree = tree.transform(lambda node: _expand(node, defs, counter))
    raise QueryError(f"tracekit macros nest deeper than {MAX_MACRO_DEPTH} calls")


def _expand(node: exp.Expression, defs: dict[str, Macro], counter: Iterator[int]) -> exp.Expression:
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
        macro = defs.get(str(node.this.this).lower())
        if macro is not None and macro.table:
            # sqlglot's Spark writer hoists nested CTEs into the statement's WITH: each
            # call's CTEs get names of their own
            body = _rename_ctes(
                _substitute(macro, node.this.expressions), f"{macro.name}_{next(counter)}"
            )
            alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(macro.name))
            return exp.Subquery(this=body, alias=alias.copy())
    if isinstance(node, exp.Anonymous):
        macro = defs.get(str(node.this).lower())
        if macro is not None:
            if macro.table:
                raise QueryError(f"{macro.name}() is a table macro: call it in FROM or JOIN")
            return exp.Paren(this=_substitute(macro, node.expressions))
    return node


def _substitute(macro: Macro, args: list[exp.Expression]) -> exp.Expression:
    if len(args) != len(macro.params):
        raise QueryError(
            f"{macro.name}() takes {len(macro.params)} argument(s), got {len(args)}"
        )  # fmt: skip
    bound = dict(zip(macro.params, args, strict=True))

    def sub(node: exp.Expression) -> exp.Expression:
        if (
            isinstance(node, exp.Table)
            and isinstance(node.this, exp.Anonymous)
            and str(node.this.this).lower() == "query_table"
        ):
            return _query_table(macro, node, bound)
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in bound:
            return _operand(bound[node.name.lower()].copy())
        return node

    return macro.body.copy().transform(sub)


def _query_table(macro: Macro, node: exp.Table, bound: dict[str, exp.Expression]) -> exp.Table:
    """`query_table(param)` as the table its (string) argument names."""
    inner = node.this.expressions
    arg = bound.get(inner[0].name.lower()) if len(inner) == 1 else None
    if not (isinstance(arg, exp.Literal) and arg.is_string):
        raise QueryError(f"{macro.name}() takes the name of a table or CTE as a string")
    table = exp.to_table(arg.this)
    if node.args.get("alias") is not None:
        table.set("alias", node.args["alias"].copy())
    return table


def _operand(arg: exp.Expression) -> exp.Expression:
    """An argument as an operand: parenthesized unless it is atomic or a call."""
    atomic = (exp.Column, exp.Literal, exp.Placeholder, exp.Func, exp.Paren, exp.Null)
    return arg if isinstance(arg, atomic) else exp.Paren(this=arg)


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
    if isinstance(node, exp.RegexpLike) and _is_flag_i(node.args.get("flag")):
        pattern = exp.Concat(expressions=[exp.Literal.string("(?i)"), node.expression.copy()])
        return exp.RegexpLike(this=node.this.copy(), expression=pattern)
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        index = _int_literal(node.expressions[0])
        if index is not None:
            # sqlglot keeps DuckDB's d[i] as offset i - 1 (x[-1] as -2); Spark's a[k] neither
            # counts from the end nor tolerates a short array (its AND does not short-circuit)
            return exp.Anonymous(
                this="try_element_at",
                expressions=[
                    node.this.copy().transform(lambda n: _rewrite(n, approx)),
                    exp.Literal.number(index + 1),
                ],
            )
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("DECIMAL(38, 0)")
    return node


def _int_literal(node: exp.Expression) -> int | None:
    if isinstance(node, exp.Neg):
        inner = _int_literal(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string and node.this.lstrip("-").isdigit():
        return int(node.this)
    return None


def _is_json_array(to: exp.DataType) -> bool:
    return (
        to.this == exp.DataType.Type.ARRAY
        and len(to.expressions) == 1
        and isinstance(to.expressions[0], exp.DataType)
        and to.expressions[0].this == exp.DataType.Type.JSON
    )


def _is_flag_i(flag: exp.Expression | None) -> bool:
    if flag is None:
        return False
    if not (isinstance(flag, exp.Literal) and flag.is_string and flag.this in ("i", "")):
        raise QueryError(f"regexp_matches flag {flag.sql()} has no Spark translation")
    return bool(flag.this == "i")
