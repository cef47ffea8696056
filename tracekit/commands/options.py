"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracekit.store.stages import StageRule, depth_rule, parse_rule


def _remember_depth(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    ctx.meta["tracekit.stage_depth"] = value


def stage_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--stage NAME=REGEX`, repeatable: stages for traces recorded without tracekit; and
    `--stage-depth N` for the stages inferred when a trace has none (read back by
    parse_stage_rules, so commands need no extra parameter)."""
    f = click.option(
        "--stage-depth",
        type=click.IntRange(min=1),
        expose_value=False,
        callback=_remember_depth,
        metavar="N",
        help="For traces without stages: infer them at this depth of the nn.Module tree "
        "(or of the NVTX ranges / ops) under each request (default: chosen from the trace).",
    )(f)
    return click.option(
        "--stage",
        "stage_rules",
        multiple=True,
        metavar="NAME=REGEX",
        help="Treat ranges/ops whose name matches REGEX as stage NAME (repeatable; "
        "also read from [stages] in tracekit.toml).",
    )(f)


def serving_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--warmup N` and `--slo METRIC.pNN<=LIMIT` (repeatable) for a batched server's figures
    (tracekit.slo.serving_options parses them)."""
    f = click.option(
        "--slo",
        "slo_texts",
        multiple=True,
        metavar="METRIC.pNN<=LIMIT",
        help="A batched server's target, e.g. 'end_to_end.p99<=200ms' (metrics: end_to_end, "
        "queue, ttft, tpot; repeatable): the share of requests within it, and goodput.",
    )(f)
    return click.option(
        "--warmup",
        type=int,
        default=0,
        show_default=True,
        metavar="N",
        help="A batched server: leave out the first N served requests by arrival and every "
        "batch that served only them.",
    )(f)


def force_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--force`: the one switch that lets a command replace what it would write (a file, a
    store, a run folder); without it, an existing output is an error that names it."""
    return click.option(
        "--force", is_flag=True, help="Replace an existing output (file, store or run folder)."
    )(f)


def _set_cache_dir(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        from tracekit.store.cache import set_cache_dir

        set_cache_dir(value)


def cache_dir_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--cache-dir DIR`: where stores built from traces are kept (sets TRACEKIT_CACHE_DIR)."""
    return click.option(
        "--cache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        expose_value=False,
        is_eager=True,
        callback=_set_cache_dir,
        help="Keep stores built from traces here (default: $TRACEKIT_CACHE_DIR, else "
        "$XDG_CACHE_HOME/tracekit, else ~/.cache/tracekit).",
    )(f)


def refresh_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--refresh", is_flag=True, help="Re-ingest even if the cache is fresh.")(f)


def parse_stage_rules(texts: tuple[str, ...]) -> list[StageRule] | None:
    """None when neither --stage nor --stage-depth was given (then tracekit.toml applies)."""
    ctx = click.get_current_context(silent=True)
    depth = ctx.meta.get("tracekit.stage_depth") if ctx else None
    if not texts and depth is None:
        return None
    rules = [parse_rule(t) for t in texts] if texts else None
    if depth is None:
        return rules
    if rules is None:  # only --stage-depth: tracekit.toml's rules still apply
        from tracekit.store.stages import load_config_rules

        rules = load_config_rules(Path.cwd())
    return [*rules, depth_rule(depth)]


def format_option(choices: tuple[str, ...], default: str) -> Callable[..., Any]:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="Output format.",
    )


def engine_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--engine duckdb|spark`: Spark reads Parquet export folders (docs/export.md)."""
    return click.option(
        "--engine",
        type=click.Choice(("duckdb", "spark")),
        default="duckdb",
        show_default=True,
        help="spark: run on Spark over Parquet export folders (`tracekit export --parquet`; "
        "needs the spark extra and Java).",
    )(f)
