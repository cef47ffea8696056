"""`tracekit report TRACE_OR_RUN_DIR [-o report.html] [--format html|md|json] [--force]`"""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands.options import (
    cache_dir_option,
    engine_option,
    force_option,
    format_option,
    parse_stage_rules,
    serving_option,
    stage_option,
)


@click.command("report")
@click.argument("source", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write here (default: beside the input, e.g. trace.report.html, or RUN_DIR/report.html; "
    "- is stdout).",
)
@format_option(("html", "md", "json"), "html")
@force_option
@click.option(
    "--top",
    "top_n",
    type=click.IntRange(1, 1000),
    default=15,
    show_default=True,
    help="Ops and kernels listed per stage.",
)
@stage_option
@serving_option
@cache_dir_option
@engine_option
def command(
    source: tuple[Path, ...],
    output: Path | None,
    fmt: str,
    force: bool,
    top_n: int,
    stage_rules: tuple[str, ...],
    engine: str,
    warmup: int,
    slo_texts: tuple[str, ...],
) -> None:
    """Write a report: end-to-end latency split by stage, findings, top ops and kernels, GPU
    busy/idle and copies, one section per trace (docs/report.md)."""
    from tracekit.report import write_report
    from tracekit.slo import serving_options

    serving = serving_options(warmup, slo_texts)
    path = write_report(
        list(source),
        output=output,
        fmt=fmt,
        force=force,
        stage_rules=parse_stage_rules(stage_rules),
        top_n=top_n,
        engine=engine,
        serving=serving,
    )
    if str(path) != "-":
        click.echo(f"Wrote {path}")
