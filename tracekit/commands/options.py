"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from tracekit.errors import ConfigError
from tracekit.stages import StageRule, parse_rule


def stage_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--stage NAME=REGEX`, repeatable: stages for traces recorded without tracekit."""
    return click.option(
        "--stage",
        "stage_rules",
        multiple=True,
        metavar="NAME=REGEX",
        help="Treat ranges/ops whose name matches REGEX as stage NAME (repeatable; "
        "also read from [stages] in tracekit.toml).",
    )(f)


def refresh_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--refresh", is_flag=True, help="Re-ingest even if the cache is fresh.")(f)


def parse_stage_rules(texts: tuple[str, ...]) -> list[StageRule] | None:
    """None when no --stage was given (then tracekit.toml applies)."""
    if not texts:
        return None
    try:
        return [parse_rule(t) for t in texts]
    except ConfigError:
        raise


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
