"""Bounded memory for any single string of a trace.

A name is copied into many rows and tables on the way to a store (a range's name into its
stages, an NVTX domain into each of its events' args): one 4 MB NVTX domain name took 1.8 GB
and 13 s to ingest, a 16 MB one ended in DuckDB's out-of-memory error. No real name comes
near MAX_CHARS (C++ kernel names reach a few thousand characters); past it a string is cut
to MAX_CHARS followed by TRUNCATED_MARK, and the ingest says how many were cut.

- `cut_staged`: names and thread labels of the staged events (every format), before derive.
- `long_text_columns` / `cut_column`: for the nsys reader, which must cut its SQLite text
  columns (StringIds, NVTX text and domain names) before the mapping copies them.
"""

from __future__ import annotations

import duckdb

MAX_CHARS = 65_536
TRUNCATED_MARK = "…[truncated by tracekit]"
_ARGS_MAX_CHARS = 16 * MAX_CHARS  # a whole args object (JSON text) of one event


def notice(n: int) -> str:
    return (
        f"{n} string(s) longer than {MAX_CHARS:,} characters were cut to that length "
        f"(marked {TRUNCATED_MARK!r})"
    )


def cut_staged(con: duckdb.DuckDBPyConnection, events: str, trace_id: int) -> int:
    """Cut the long names of `events` and the long labels of `threads` (this trace's rows);
    args longer than their bound keep only a note of their length (a JSON object cannot be
    cut part way). Returns the number of values cut."""
    cut = 0
    args_note = "json_object('tracekit_truncated_chars', length(args::VARCHAR))"
    for table, column, text, limit, value in (
        (events, "name", "name", MAX_CHARS, _cut("name")),
        (events, "args", "args::VARCHAR", _ARGS_MAX_CHARS, args_note),
        ("threads", "process_name", "process_name", MAX_CHARS, _cut("process_name")),
        ("threads", "thread_name", "thread_name", MAX_CHARS, _cut("thread_name")),
    ):
        # strlen (bytes) >= length (characters): the cheap test first
        row = con.execute(
            f"UPDATE {table} SET {column} = {value} WHERE trace_id = {int(trace_id)} "
            f"AND strlen({text}) > {limit} AND length({text}) > {limit}"
        ).fetchone()
        cut += int(row[0]) if row else 0
    return cut


def _cut(column: str) -> str:
    return f"left({column}, {MAX_CHARS}) || '{TRUNCATED_MARK}'"
