"""Runs derive.sql over a one-trace store: nesting, launches, stages, requests, attribution."""

from __future__ import annotations

import re
from importlib.resources import files

import duckdb

from tracekit.ingest.common import STAGING_TABLE
from tracekit.stages import StageRule


def _events_ddl() -> str:
    schema = files("tracekit").joinpath("schema.sql").read_text()
    match = re.search(r"CREATE TABLE IF NOT EXISTS events \(.*?\n\);", schema, re.S)
    assert match, "schema.sql lost its events table"  # a packaging bug, not user input
    return match.group(0)


def derive(con: duckdb.DuckDBPyConnection, rules: list[StageRule]) -> None:
    """Fill the derived columns and tables of the single trace held by `con`.

    The rows come from the ingestor's temp staging table when it left them there, else from
    `events` itself (renamed aside; `events` is then written anew).
    """
    staged = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = $t",
        {"t": STAGING_TABLE},
    ).fetchone()
    if not (staged and staged[0]):
        con.execute(f"ALTER TABLE events RENAME TO {STAGING_TABLE}")
        con.execute(_events_ddl())
    con.execute("CREATE OR REPLACE TEMP TABLE _stage_rules (stage VARCHAR, pattern VARCHAR)")
    if rules:
        con.executemany(
            "INSERT INTO _stage_rules VALUES (?, ?)", [(r.stage, r.pattern) for r in rules]
        )
    script = files("tracekit").joinpath("derive.sql").read_text()
    con.execute(script)
    for table in (
        "_host",
        "_starts",
        "_nest",
        "_children",
        "_launch",
        "_rule_hits",
        "_stage_ranges",
        "_req_ranges",
        "_stage_req",
        "_host_attr",
        "_derived",
        "_stage_rules",
    ):
        con.execute(f"DROP TABLE IF EXISTS {table}")
