"""Named-query files: header validation, and every shipped query loads."""

from __future__ import annotations

import pytest

from tracekit.errors import QueryError
from tracekit.sql import all_queries, parse_query

GOOD = """-- name: q
-- returns: n
-- param: $trace_id INTEGER which trace
-- default: $trace_id 1
-- Counts events.
SELECT count(*) AS n FROM events WHERE trace_id = $trace_id ORDER BY 1
"""


def test_parse_good_and_bind() -> None:
    q = parse_query(GOOD, "q.sql")
    assert q.name == "q" and q.params[0].default == "1"
    assert q.bind({}) == {"trace_id": 1}
    assert q.bind({"trace_id": "3"}) == {"trace_id": 3}
    with pytest.raises(QueryError, match="must be INTEGER"):
        q.bind({"trace_id": "1; DROP TABLE events"})
    with pytest.raises(QueryError, match="unknown parameter"):
        q.bind({"nope": 1})


def test_quotes_in_comments_and_dashes_in_strings() -> None:
    # An apostrophe in a comment once paired with the next string's quote and hid a $param.
    body = ("SELECT count(*) AS n, '--' AS dashes FROM events -- the chain's end\n"
            "WHERE name <> 'x' AND trace_id = $trace_id ORDER BY 1\n")  # fmt: skip
    text = GOOD.split("SELECT")[0] + body
    q = parse_query(text, "q.sql")
    assert q.bind({}) == {"trace_id": 1}
    with pytest.raises(QueryError, match=r"\$other used but not declared"):
        parse_query(text.replace("ORDER BY 1", "AND $other = 1 ORDER BY 1"), "q.sql")


@pytest.mark.parametrize(
    "text, message",
    [
        (GOOD.replace("-- name: q\n", ""), "lacks '-- name:'"),
        (
            GOOD.replace("-- param: $trace_id INTEGER which trace\n", "").replace(
                "-- default: $trace_id 1\n", ""
            ),
            "used but not declared",
        ),
        (GOOD.replace("= $trace_id", "= 1"), "declared but not used"),
        (GOOD.replace(" ORDER BY 1", ""), "ORDER BY"),
    ],
)
def test_parse_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(QueryError, match=message) as e:
        parse_query(text, "queries/q.sql")
    assert str(e.value).startswith("queries/q.sql")


def test_all_shipped_queries_load() -> None:
    queries = all_queries()
    for name, q in queries.items():
        assert q.name == name and q.returns


def test_query_catalogue_documents_every_query():
    """docs/queries.md has a section per queries/*.sql, with the header's `returns` line."""
    from pathlib import Path

    from tracekit.sql import all_queries

    doc = (Path(__file__).resolve().parent.parent / "docs" / "queries.md").read_text()
    sections = {}
    for part in doc.split("\n## ")[1:]:
        name, _, body = part.partition("\n")
        sections[name.strip()] = body
    queries = all_queries()
    assert set(sections) == set(queries)
    for name, q in queries.items():
        assert f"**Returns:** {q.returns}" in sections[name], name


def test_queries_over_one_trace_return_its_trace_id() -> None:
    """`tracekit query` concatenates such a query's rows over every trace: each row must say
    which trace it is from."""
    from tracekit.sql import all_queries

    for q in all_queries().values():
        if "trace_id" in {p.name for p in q.params}:
            assert "trace_id" in q.returns, q.name
