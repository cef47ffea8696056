"""`tracekit sql TRACE_OR_STORE "SELECT ..."`"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.commands.options import parse_stage_rules, refresh_option, stage_option
from tracekit.output import FORMATS, write_result


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
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here, not stdout.")
@click.option("--write", is_flag=True, help="Open a store read-write (default: read-only).")
@stage_option
@refresh_option
def command(
    source: tuple[Path, ...],
    query: str,
    fmt: str,
    output: Path | None,
    write: bool,
    stage_rules: tuple[str, ...],
    refresh: bool,
) -> None:
    """Run SQL over traces, run folders or stores. Tables: traces, threads, events, stages,
    requests, attributes (docs/schema.md)."""
    import tracekit
    from tracekit.atomic import atomic_output

    with tracekit.open(
        list(source),
        stage_rules=parse_stage_rules(stage_rules),
        refresh=refresh,
        read_only=not write,
    ) as traces:
        # (table and json from plain rows: importing polars would triple a warm query's time)
        df = traces.rows(query) if fmt in ("table", "json") else traces.sql(query)
    if output is not None:
        with atomic_output(output, binary=fmt == "parquet") as fh:
            write_result(df, fmt, fh)
        click.echo(f"Wrote {output}", err=True)
    elif fmt == "parquet":
        write_result(df, fmt, sys.stdout.buffer)
    else:
        write_result(df, fmt, sys.stdout)
