"""Runs derive.sql over a one-trace store: nesting, launches, stages, requests, attribution."""

from __future__ import annotations

import re
from importlib.resources import files

import duckdb

from tracekit import sqlfile
from tracekit.categories import install
from tracekit.ingest.common import STAGING_TABLE
from tracekit.progress import NO_PROGRESS, Progress
from tracekit.store.literals import execute
from tracekit.store.stages import StageRule, split_depth
from tracekit.structures import StructureStage, effective_structures
from tracekit.structures import install as install_structures


def table_ddl(table: str) -> str:
    """schema.sql's CREATE TABLE statement for `table`."""
    schema = files("tracekit.store").joinpath("schema.sql").read_text()
    match = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \(.*?\n\);", schema, re.S)
    assert match, f"schema.sql lost its {table} table"  # a packaging bug, not user input
    return match.group(0)


def events_ddl() -> str:
    """schema.sql's CREATE TABLE statement for `events`."""
    return table_ddl("events")


def derive_steps() -> list[tuple[str, str]]:
    """derive.sql as (what, SQL) steps: its blocks, each named for the progress line."""
    blocks = sqlfile.load("tracekit.store", "derive.sql").blocks
    return [(b.name.replace("_", " "), b.sql) for b in blocks]


def derive(
    con: duckdb.DuckDBPyConnection,
    rules: list[StageRule],
    progress: Progress = NO_PROGRESS,
    structures: list[StructureStage] | None = None,
) -> None:
    """Fill the derived columns and tables of the single trace held by `con`.

    Stages come from tracekit ranges, then `rules`, then the serving `structures` (default:
    tracekit.toml's and the built-in ones), then the nn.Module tree / ranges / ops.
    The rows come from the ingestor's temp staging table when it left them there, else from
    `events` itself (renamed aside; `events` is then written anew).
    """
    staged = execute(
        con,
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = $t",
        {"t": STAGING_TABLE},
    ).fetchone()
    if not (staged and staged[0]):
        con.execute(f"ALTER TABLE events RENAME TO {STAGING_TABLE}")
        con.execute(events_ddl())
    install(con)  # tk_op_name names inferred stages
    rules, depth = split_depth(rules)
    con.execute("CREATE OR REPLACE TEMP TABLE _stage_rules (stage VARCHAR, pattern VARCHAR)")
    con.execute("CREATE OR REPLACE TEMP TABLE _infer_opts (depth INTEGER)")
    con.execute(f"INSERT INTO _infer_opts VALUES ({'NULL' if depth is None else int(depth)})")
    if rules:
        execute(
            con,
            "INSERT INTO _stage_rules SELECT unnest($stages), unnest($patterns)",
            {"stages": [r.stage for r in rules], "patterns": [r.pattern for r in rules]},
        )

    install_structures(con, effective_structures() if structures is None else structures)
    steps = derive_steps()
    for k, (what, sql) in enumerate(steps, 1):
        progress.step(f"deriving {k}/{len(steps)}: {what}")
        con.execute(sql)
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
        "_stage_keys",
        "_stage_near",
        "_host_attr",
        "_stage_enc",
        "_req_enc",
        "_stage_encl",
        "_req_encl",
        "_derived",
        "_op_names",
        "_stage_rules",
        "_infer_opts",
        "_structure_rules",
        "_structure_hits",
        "_structure_spans",
        "_structure_enclosed",
        "_structure_gen",
        "_cand",
        "_cand_depth",
        "_cand_stats",
    ):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    for view in (
        "_stage_in",
        "_req_in",
        "_stage_needed",
        "_req_needed",
        "_stage_unplaced",
        "_req_unplaced",
    ):
        con.execute(f"DROP VIEW IF EXISTS {view}")
    for macro in (
        "tk_latest_start",
        "tk_ranked",
        "tk_enclosing",
        "tk_innermost_open",
    ):
        con.execute(f"DROP MACRO TABLE IF EXISTS {macro}")
