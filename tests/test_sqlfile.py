"""Every shipped .sql file follows one grammar (tracekit/sqlfile.py), checked when loaded."""

from __future__ import annotations

from importlib.resources import files

import pytest

from tracekit import sqlfile
from tracekit.sqlfile import SqlFileError, parse

GOOD = """-- A file of two blocks.
-- name: first
-- returns: n
-- param: $trace_id INTEGER which trace
-- default: $trace_id 1
-- per_trace: planned badly over many traces
-- Counts events.
SELECT count(*) AS n FROM events WHERE trace_id = $trace_id;

-- name: second
-- splice: @table the table to read
SELECT * FROM @table;
"""


def test_blocks_keep_their_header_and_sql() -> None:
    f = parse(GOOD, "x.sql")
    assert f.description == "A file of two blocks."
    assert [b.name for b in f.blocks] == ["first", "second"]
    first = f["first"]
    assert first.returns == "n" and first.summary == "Counts events."
    assert first.per_trace == "planned badly over many traces" and f["second"].per_trace == ""
    assert [(p.name, p.type, p.default) for p in first.params] == [("trace_id", "INTEGER", "1")]
    assert first.sql.startswith("SELECT count(*)") and first.source == "x.sql:2"
    assert f["second"].spliced(table="events") == "SELECT * FROM events;\n"
    with pytest.raises(SqlFileError, match="no splice 'other'"):
        f["second"].spliced(other="x")


@pytest.mark.parametrize(
    "text, where, message",
    [
        ("SELECT 1;\n-- name: a\nSELECT 2;\n", "x.sql:1", "SQL before the first"),
        ("-- just a comment\n", "x.sql:1", "no `-- name:` block"),
        ("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n", "x.sql:3", "duplicate name 'a'"),
        ("-- name: a b\nSELECT 1;\n", "x.sql:1", "not an identifier"),
        ("-- name: a\nSELECT $x;\n", "x.sql:1", r"\$x used but not declared"),
        ("-- name: a\n-- param: $x INTEGER x\nSELECT 1;\n", "x.sql:1", r"\$x declared but not"),
        ("-- name: a\n-- param: x INTEGER\nSELECT 1;\n", "x.sql:2", "malformed param"),
        ("-- name: a\nSELECT @t;\n", "x.sql:1", "@t used but not declared"),
        ("-- name: a\n-- splice: @t t\nSELECT 1;\n", "x.sql:1", "@t declared but not used"),
        ("-- name: a\n-- per_trace:\nSELECT 1;\n", "x.sql:2", "empty per_trace line"),
    ],
)
def test_grammar_errors_name_file_and_line(text: str, where: str, message: str) -> None:
    with pytest.raises(SqlFileError, match=message) as e:
        parse(text, "x.sql")
    assert str(e.value).startswith(where + ":")


def test_parameters_in_comments_and_strings_are_text() -> None:
    f = parse("-- name: a\nSELECT '$x @y' AS s -- not $z or @w\n;\n", "x.sql")
    assert f["a"].params == () and f["a"].splices == ()


@pytest.mark.parametrize(
    "package, name",
    [
        ("tracekit", "macros.sql"),
        ("tracekit.store", "derive.sql"),
        ("tracekit.ingest", "kineto.sql"),
    ]  # fmt: skip
    + [
        ("tracekit.queries", e.name)
        for e in files("tracekit.queries").iterdir()
        if e.name.endswith(".sql")
    ],  # fmt: skip
)
def test_every_shipped_sql_file_loads(package: str, name: str) -> None:
    f = sqlfile.load(package, name)
    assert f.blocks and all(b.sql.strip() for b in f.blocks)
