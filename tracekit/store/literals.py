"""Statement parameters as typed SQL literals instead of bound Python values.

DuckDB's Python client converts each bound value by first asking whether it is pandas.NaT:
its first bound parameter in a process imports pandas where pandas is installed (0.26-0.28 s
of one core here, +0.3 s on a warm `tracekit sql` and on every cold ingest), and where it is
not, every value retries the failed import. tracekit's parameters are few and simple (ints,
floats, strings, timestamps, lists of them), so `execute` writes each into the statement as
a literal cast to the type the client would give the Python value (int -> INTEGER or wider,
float -> DOUBLE, str -> VARCHAR, datetime -> TIMESTAMP): the same value of the same type.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

# The client's integer types, narrowest first (as it picks them for a Python int).
_INT_TYPES = (
    ("INTEGER", range(-(2**31), 2**31)),
    ("BIGINT", range(-(2**63), 2**63)),
    ("UBIGINT", range(0, 2**64)),
    ("HUGEINT", range(-(2**127), 2**127)),
    ("UHUGEINT", range(0, 2**128)),
)


def sql_literal(value: Any) -> str:
    """`value` as a DuckDB literal of the type the Python client binds it as."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        for name, fits in _INT_TYPES:
            if value in fits:
                return f"CAST({value} AS {name})"
        raise ValueError(f"integer parameter {value} does not fit 128 bits")
    if isinstance(value, float):
        text = repr(value) if math.isfinite(value) else f"'{value}'"
        return f"CAST({text} AS DOUBLE)"
    if isinstance(value, str):
        return f"CAST({string_literal(value)} AS VARCHAR)"
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return f"CAST('{value.isoformat(sep=' ')}' AS TIMESTAMP)"
    if isinstance(value, list | tuple):
        return _list_literal(value)
    raise TypeError(f"no SQL literal for a {type(value).__name__} parameter")


def row_literal(row: Sequence[Any]) -> str:
    """One row of an INSERT's VALUES list, as plain literals: the INSERT casts each to its
    column's type (half the parse time of typed literals: 0.025 ms a row of four here)."""
    return "(" + ", ".join(_plain(v) for v in row) + ")"


def _plain(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return sql_literal(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return string_literal(value)
    return sql_literal(value)


def string_literal(text: str) -> str:
    """`text` as a quoted SQL string: quotes doubled, and a NUL, which would end the
    statement's text inside DuckDB's parser, spliced in with chr(0)."""
    inner = text.replace("'", "''").replace("\x00", "' || chr(0) || '")
    return f"'{inner}'"


def _list_literal(values: Sequence[Any]) -> str:
    items = ", ".join(sql_literal(v) for v in values)
    if values and all(isinstance(v, str) for v in values):
        return f"CAST([{items}] AS VARCHAR[])"
    return f"[{items}]"  # (DuckDB gives the list its elements' widest type, as the client does)


def execute(
    con: duckdb.DuckDBPyConnection, query: str, params: Mapping[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """`con.execute(query, params)` for `$name` parameters, without binding a Python value."""
    if not params:
        return con.execute(query)
    return con.execute(substitute(query, params))


_NAME_TOKENS = (duckdb.token_type.identifier, duckdb.token_type.keyword)


def substitute(query: str, params: Mapping[str, Any]) -> str:
    """`query` with each `$name` parameter replaced by its value's literal. DuckDB's own
    tokenizer finds them, so a `$name` inside a string, a quoted name or a comment stays.
    (Not PREPARE/EXECUTE: a statement with parameters is planned twice there, +0.3 s over
    a report's queries.)"""
    text = query.encode()  # (the tokenizer's positions are UTF-8 byte offsets)
    tokens = duckdb.tokenize(query)
    out: list[bytes] = []
    done, used = 0, set()
    for (pos, kind), (next_pos, next_kind) in zip(tokens, tokens[1:], strict=False):
        if kind != duckdb.token_type.operator or text[pos : pos + 1] != b"$":
            continue
        if next_pos != pos + 1 or next_kind not in _NAME_TOKENS:
            continue
        end = next_pos
        while end < len(text) and (text[end : end + 1].isalnum() or text[end] == ord("_")):
            end += 1
        name = text[next_pos:end].decode()
        if name not in params:
            raise duckdb.InvalidInputException(f"no value for parameter ${name}")
        out += [text[done:pos], sql_literal(params[name]).encode()]
        done = end
        used.add(name)
    unused = sorted(set(params) - used)
    if unused:
        raise duckdb.InvalidInputException(f"the query has no parameter ${unused[0]}")
    return b"".join([*out, text[done:]]).decode()
