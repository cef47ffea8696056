"""`tracekit export STORE_OR_TRACE... --parquet DIR`"""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands.options import (
    cache_dir_option,
    force_option,
    parse_stage_rules,
    stage_option,
)


@click.command("export")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--parquet", "parquet_dir", type=click.Path(path_type=Path), required=True,
              help="Folder to write: a subfolder per table, partitioned by trace_id.")  # fmt: skip
@force_option
@stage_option
@cache_dir_option
def command(sources: tuple[Path, ...], parquet_dir: Path, force: bool,
            stage_rules: tuple[str, ...]) -> None:  # fmt: skip
    """Export traces or stores as Parquet (hive-partitioned by trace_id) for DuckDB, Spark
    SQL or Trino (docs/export.md)."""
    from tracekit.export import export_parquet

    result = export_parquet(list(sources), parquet_dir, parse_stage_rules(stage_rules), force)
    click.echo(f"Wrote {result.out} ({result.rows.get('events', 0)} events)")
