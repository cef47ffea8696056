"""tracekit.store.literals binds parameters as typed SQL literals: DuckDB's own binding of
the same Python values (its client, the oracle) gives the same values of the same types."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import duckdb
import pytest

from tracekit.store.literals import execute, sql_literal

VALUES: list[Any] = [
    None, True, False, 0, 5, -(2**31), 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, 2**64,
    -(2**63) - 1, 2**127, 1.5, -0.0, 1e-300, 1e308, math.inf, -math.inf, "", "it's", "a\x00b",
    "ü 日本 \u2028", "'; DROP TABLE t; --", "$a", dt.datetime(2026, 12, 6, 11, 0, 0, 123456),
    dt.datetime(1970, 1, 1), ["a", "b"], ["a", None], [], [1, 2], [1, 2**40], (3, 4),
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_literal_is_the_value_the_client_binds(value: Any) -> None:
    con = duckdb.connect()
    query = "SELECT $v AS v, typeof($v) AS t"
    bound = con.execute(query, {"v": value}).fetchall()
    assert execute(con, query, {"v": value}).fetchall() == bound


def test_nan_is_a_double_nan() -> None:
    v, t = execute(duckdb.connect(), "SELECT $v, typeof($v)", {"v": math.nan}).fetchone()  # type: ignore[misc]
    assert math.isnan(v) and t == "DOUBLE"


def test_keyword_names_several_parameters_and_statements_that_write() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k VARCHAR, n INTEGER)")
    execute(con, "INSERT INTO t SELECT unnest($keys), $limit", {"keys": ["x", "y"], "limit": 7})
    rows = execute(con, "SELECT * FROM t WHERE n = $limit ORDER BY k LIMIT $limit", {"limit": 7})
    assert rows.fetchall() == [("x", 7), ("y", 7)]
    assert execute(con, "SELECT count(*) FROM t").fetchone() == (2,)


def test_what_has_no_literal_is_refused() -> None:
    with pytest.raises(TypeError):
        sql_literal(object())
    with pytest.raises(ValueError):
        sql_literal(2**200)


def test_only_parameters_are_replaced_not_lookalikes_in_strings_names_or_comments() -> None:
    con = duckdb.connect()
    query = """-- $a in a comment, µs → ns
        SELECT $a AS "$a", '$a µs→' AS s, $ab AS ab /* $a */, $a::VARCHAR || '$ab' AS t"""
    row = execute(con, query, {"a": 1, "ab": "x'y"}).fetchone()
    assert row == (1, "$a µs→", "x'y", "1$ab")
    assert [d[0] for d in con.description or []] == ["$a", "s", "ab", "t"]


def test_a_missing_or_an_unused_parameter_is_an_error_as_when_bound() -> None:
    con = duckdb.connect()
    for params in ({"b": 1}, {"a": 1, "b": 2}):
        with pytest.raises(duckdb.InvalidInputException):
            con.execute("SELECT $a", params)
        with pytest.raises(duckdb.InvalidInputException):
            execute(con, "SELECT $a", params)
