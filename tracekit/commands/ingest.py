"""`tracekit ingest TRACE... [-o store.duckdb]`"""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands.options import (
    cache_dir_option,
    force_option,
    parse_stage_rules,
    refresh_option,
    stage_option,
)
from tracekit.errors import TracekitError
from tracekit.store.traceset import write_store


@click.command("ingest")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write one store holding every trace here (default: one cached store per trace, "
    "in the cache directory).",
)
@force_option
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Ingest this many traces at once, one process each (default: one per core).",
)
@stage_option
@cache_dir_option
@refresh_option
def command(
    traces: tuple[Path, ...],
    output: Path | None,
    force: bool,
    jobs: int | None,
    stage_rules: tuple[str, ...],
    refresh: bool,
) -> None:
    """Load nsys SQLite exports, .nsys-rep files, Kineto/Chrome JSON traces or folders of them
    into DuckDB stores. Prints what each trace held and what could not be placed."""
    from tracekit.store.traceset import ingest_many, resolve_inputs

    rules = parse_stage_rules(stage_rules)
    if output is not None:
        from tracekit.atomic import check_output
        from tracekit.store.traceset import input_files

        check_output(output, input_files(traces), force)
        out, results = write_store(traces, output, rules, refresh, jobs)
    else:
        files, stores = resolve_inputs(traces)
        if stores:
            raise TracekitError(f"{stores[0]}: is already a store; nothing to ingest")
        results = ingest_many(files, rules, refresh, jobs)
        out = None
    for r in results:
        if r.reused:
            click.echo(f"{r.source}: cached, unchanged ({r.store})")
            continue
        skipped = sum(r.skipped.values())
        line = f"{r.source}: {r.events} events, {skipped} skipped"
        if skipped:
            line += ": " + ", ".join(f"{n} {why}" for why, n in sorted(r.skipped.items()))
        click.echo(f"{line} -> {r.store}")
        for w in r.warnings:
            click.echo(f"warning: {r.source}: {w}", err=True)
    if out is not None:
        click.echo(f"Wrote {out}")
