"""`tracekit query NAME TRACE... [--param k=v]` and `tracekit query --list`"""

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
from tracekit.errors import QueryError
from tracekit.output import FORMATS, render_result


@click.command("query")
@click.argument("name", required=False)
@click.argument("source", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A query parameter (repeatable); see --list.",
)
@click.option("--list", "list_queries", is_flag=True, help="List the named queries.")
@click.option("--show", is_flag=True, help="Print the query's SQL instead of running it.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@stage_option
@cache_dir_option
@refresh_option
@engine_option
def command(
    name: str | None,
    source: tuple[Path, ...],
    params: tuple[str, ...],
    list_queries: bool,
    show: bool,
    fmt: str,
    stage_rules: tuple[str, ...],
    refresh: bool,
    engine: str,
) -> None:
    """Run a named query from the catalogue (docs/queries.md) over traces or stores."""
    from tracekit.sql import all_queries, load_query

    if list_queries:
        for q in all_queries().values():
            click.echo(f"{q.name}\n    returns: {q.returns}")
            for p in q.params:
                default = f" (default {p.default})" if p.default is not None else ""
                click.echo(f"    --param {p.name}=<{p.type.lower()}>  {p.description}{default}")
        return
    if not name:
        raise QueryError("give a query NAME (see `tracekit query --list`)")
    q = load_query(name)
    if show:  # with --engine spark: the Spark SQL that would run
        if engine == "spark":
            from tracekit.spark_sql import to_spark

            click.echo(to_spark(q.text, pretty=True))
        else:
            click.echo(q.text)
        return
    if not source:
        raise QueryError(f"query {name}: give at least one TRACE or store")
    values = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep:
            raise QueryError(f"--param {item!r}: expected KEY=VALUE")
        values[key.strip()] = value
    from tracekit.store.traceset import open_engine

    with open_engine(
        engine, list(source), stage_rules=parse_stage_rules(stage_rules), refresh=refresh
    ) as traces:
        df = traces.query(name, **values)
    sys.stdout.buffer.write(render_result(df, fmt))
