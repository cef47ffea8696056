"""`tracekit scrub IN OUT [--keep-env] [--keep-args] [--keep-hosts]`"""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands.options import force_option


@click.command("scrub")
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--keep-env", is_flag=True, help="Keep environment variables.")
@click.option("--keep-args", is_flag=True, help="Keep command lines and install paths.")
@click.option("--keep-hosts", is_flag=True, help="Keep host names and addresses.")
@force_option
def command(
    source: Path, output: Path, keep_env: bool, keep_args: bool, keep_hosts: bool, force: bool
) -> None:
    """Write a shareable copy of an nsys SQLite export or a Kineto/Chrome JSON trace, without
    environment variables, command lines or host names. The input is never modified."""
    from tracekit.scrub import ScrubOptions, scrub_trace

    options = ScrubOptions(keep_env=keep_env, keep_args=keep_args, keep_hosts=keep_hosts)
    result = scrub_trace(source, output, options, force=force)
    removed = ", ".join(f"{n} {what}" for what, n in sorted(result.removed.items()) if n)
    click.echo(f"Wrote {result.output} (removed: {removed or 'nothing'})")
