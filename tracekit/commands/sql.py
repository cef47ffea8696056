"""`tracekit sql TRACE_OR_STORE "SELECT ..."`"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.commands.options import (
    cache_dir_option,
    engine_option,
    parse_stage_rules,
    refresh_option,
    stage_option,
)
from tracekit.output import FORMATS, render_result


@click.command("sql")
@click.argument("source", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.argument("query")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table fits the terminal; csv has a header row; json is an array of rows.",
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Write here, not stdout (- is stdout)."
)
@click.option("--write", is_flag=True, help="Open a store read-write (default: read-only).")
@stage_option
@cache_dir_option
@refresh_option
@engine_option
def command(
    source: tuple[Path, ...],
    query: str,
    fmt: str,
    output: Path | None,
    write: bool,
    stage_rules: tuple[str, ...],
    refresh: bool,
    engine: str,
) -> None:
    """Run SQL (DuckDB's dialect) over traces, run folders, stores or Parquet export folders.
    Tables: traces, threads, events, stages, requests, attributes, gpu_islands
    (docs/schema.md)."""
    from tracekit.atomic import atomic_output, check_output
    from tracekit.store.traceset import input_files, open_engine

    if output is not None and str(output) == "-":
        output = None
    if output is not None:  # (-o replaces an earlier output, never an input)
        check_output(output, input_files(source), force=True)
    with open_engine(
        engine,
        list(source),
        stage_rules=parse_stage_rules(stage_rules),
        refresh=refresh,
        read_only=not write,
    ) as traces:
        # (table and json from plain rows: importing polars would triple a warm query's time)
        rows = getattr(traces, "rows", None)  # DuckDB has it; Spark returns DataFrames only
        df = rows(query) if rows is not None and fmt in ("table", "json") else traces.sql(query)
    data = render_result(df, fmt)
    if output is not None:
        with atomic_output(output, binary=True) as fh:
            fh.write(data)
        click.echo(f"Wrote {output}", err=True)
    else:
        sys.stdout.buffer.write(data)
