"""`tracekit diff BASELINE CANDIDATE [-o diff.html] [--format html|md|json|table]`"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.commands.options import (
    cache_dir_option,
    force_option,
    parse_stage_rules,
    refresh_option,
    serving_option,
    stage_option,
)

_SUFFIX_FORMAT = {".html": "html", ".htm": "html", ".md": "md", ".json": "json"}


@click.command("diff")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option(
    "--baseline-run",
    "baseline_runs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Another baseline run (repeatable): N vs N with a noise estimate.",
)
@click.option(
    "--candidate-run",
    "candidate_runs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Another candidate run (repeatable).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write here (default: stdout; html: <candidate>.diff.html beside it; - is stdout).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "md", "json", "html")),
    default=None,
    help="Output format (default: from -o's suffix, else table).",
)
@click.option(
    "--per",
    metavar="RANGE",
    default=None,
    help="Compare ops and kernels per occurrence of this range (an iteration marker: NVTX "
    "message or record_function name); default per request, else per second of span.",
)
@click.option(
    "--min-change",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    metavar="PCT",
    help="Per-call changes below PCT % of the time per call before are 'same'.",
)
@force_option
@stage_option
@serving_option
@cache_dir_option
@refresh_option
def command(baseline: Path, candidate: Path, baseline_runs: tuple[Path, ...],
            candidate_runs: tuple[Path, ...], output: Path | None, fmt: str | None,
            per: str | None, min_change: float, force: bool, stage_rules: tuple[str, ...],
            warmup: int, slo_texts: tuple[str, ...], refresh: bool) -> None:  # fmt: skip
    """Compare a baseline with a candidate: a headline naming the changes that matter, stage
    latency (p50/p90/p99/mean), throughput, GPU busy per device, and ops/kernels compared per
    call, each change split into more calls and slower calls, per unit of work.

    BASELINE and CANDIDATE are each a trace, a run folder, or a folder of run folders; with
    several runs per side the change is weighed against a bootstrap and the run-to-run
    spread (docs/diff-check.md)."""
    from tracekit.atomic import atomic_output
    from tracekit.compare.diff import diff_runs
    from tracekit.compare.render import render
    from tracekit.slo import serving_options

    serving = serving_options(warmup, slo_texts)
    stdout = output is not None and str(output) == "-"
    if fmt is None:
        fmt = _SUFFIX_FORMAT.get(output.suffix.lower(), "table") if output else "table"
    if output is None and fmt == "html" and not stdout:
        output = candidate.parent / f"{candidate.name.split('.')[0]}.diff.html"
    if output is not None and str(output) == "-":
        output = None
    elif output is not None:
        from tracekit.atomic import check_output
        from tracekit.store.traceset import input_files

        check_output(output, input_files([baseline, candidate, *baseline_runs,
                                          *candidate_runs]), force)  # fmt: skip
    result = diff_runs([baseline, *baseline_runs], [candidate, *candidate_runs],
                       stage_rules=parse_stage_rules(stage_rules), refresh=refresh,
                       min_change=min_change / 100, per=per, serving=serving)  # fmt: skip
    text = render(result, fmt)
    if output is None:
        sys.stdout.write(text)
        return
    with atomic_output(output) as fh:
        fh.write(text)
    click.echo(f"Wrote {output}")
