"""`tracekit check TRACE [--baseline B] [--budget EXPR ...] [--junit FILE]`: a CI gate."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands.options import (
    cache_dir_option,
    parse_stage_rules,
    refresh_option,
    serving_option,
    stage_option,
)
from tracekit.errors import CheckFailed, ConfigError


@click.command("check")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--baseline",
    type=click.Path(path_type=Path),
    default=None,
    help="Trace or run(s) to compare against (for --max-regression and kernels).",
)
@click.option(
    "--budget",
    "budgets",
    multiple=True,
    metavar="STAGE.METRIC<=VALUE",
    help="A budget, e.g. 'inference.p99_ms<=50' (repeatable; also <, >=, >).",
)
@click.option("--budget-file", "budget_files", multiple=True,
              type=click.Path(path_type=Path), help="Budgets, one per line (# comments), "
              "or a .toml file with a [budgets] table.")  # fmt: skip
@click.option(
    "--max-regression",
    "regressions",
    multiple=True,
    metavar="STAGE.METRIC=N%",
    help="Allowed growth over --baseline, e.g. 'inference.p99_ms=10%' (repeatable).",
)
@click.option(
    "--no-new-top-kernels",
    "top_kernels",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Fail if a kernel in the top N is not in the baseline's top N.",
)
@click.option(
    "--junit",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write a JUnit XML file, one testcase per budget.",
)
@stage_option
@serving_option
@cache_dir_option
@refresh_option
def command(trace: Path, baseline: Path | None, budgets: tuple[str, ...],
            budget_files: tuple[Path, ...], regressions: tuple[str, ...],
            top_kernels: int | None, junit: Path | None, stage_rules: tuple[str, ...],
            warmup: int, slo_texts: tuple[str, ...], refresh: bool) -> None:  # fmt: skip
    """Hold TRACE to latency budgets. Prints PASS/FAIL per budget; exit 0 when all hold,
    1 when one fails, 2 for bad input or a malformed budget (docs/diff-check.md).

    Metrics: p50_ms p90_ms p99_ms mean_ms max_ms share count, of any stage, end_to_end
    or unattributed."""
    from tracekit.compare.budgets import parse_budget, parse_budget_file, parse_regression
    from tracekit.compare.check import run_check, write_junit
    from tracekit.slo import serving_options

    serving = serving_options(warmup, slo_texts)
    parsed = [parse_budget(b) for b in budgets]
    for f in budget_files:
        parsed += parse_budget_file(f)
    parsed += [parse_regression(r) for r in regressions]
    if not parsed and top_kernels is None:
        raise ConfigError("nothing to check: give --budget, --budget-file, --max-regression "
                          "or --no-new-top-kernels")  # fmt: skip
    result = run_check(trace, parsed, baseline, top_kernels,
                       stage_rules=parse_stage_rules(stage_rules), refresh=refresh,
                       serving=serving)  # fmt: skip
    for v in result.views:
        click.echo(f"Measured {v}", err=True)
    for o in result.outcomes:
        click.echo(o.line)
    if junit is not None:
        write_junit(result, junit)
        click.echo(f"Wrote {junit}", err=True)
    if not result.passed:
        raise CheckFailed(f"{result.failures} of {len(result.outcomes)} budgets failed")
