"""`tracekit cache [list|size|clear|prune --max-size SIZE]`: the stores tracekit keeps."""

from __future__ import annotations

import click

from tracekit.store import cache


@click.group("cache", invoke_without_command=True)
@click.pass_context
def command(ctx: click.Context) -> None:
    """Show or trim the cache of stores built from traces (default: `list`).

    The cache directory is $TRACEKIT_CACHE_DIR, else $XDG_CACHE_HOME/tracekit, else
    ~/.cache/tracekit; TRACEKIT_CACHE_MAX_SIZE (default 20GB) bounds it, least recently used
    stores going first."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_entries)


@command.command("list")
def list_entries() -> None:
    """Every cached store and export, least recently used first."""
    items = cache.entries()
    click.echo(f"{cache.cache_dir()}: {len(items)} files, {cache.human_size(cache.total_size())}")
    for e in items:
        rel = e.path.relative_to(cache.cache_dir())
        click.echo(f"{cache.human_size(e.size):>10}  {cache.age(e.last_used):>12}  {rel}")


@command.command("size")
def size() -> None:
    """The cache's total size in bytes, and where it is."""
    click.echo(f"{cache.total_size()}\t{cache.cache_dir()}")


@command.command("clear")
def clear() -> None:
    """Remove every cached file (they are rebuilt from the traces when needed)."""
    n, freed = cache.clear()
    click.echo(f"Removed {n} files, {cache.human_size(freed)} from {cache.cache_dir()}")


@command.command("prune")
@click.option("--max-size", required=True, metavar="SIZE", help="e.g. 500MB, 2GB.")
def prune(max_size: str) -> None:
    """Remove least recently used files until the cache holds at most SIZE."""
    n, freed = cache.prune(cache.parse_size(max_size, "--max-size"))
    click.echo(
        f"Removed {n} files, {cache.human_size(freed)}; {cache.human_size(cache.total_size())} left"
    )
