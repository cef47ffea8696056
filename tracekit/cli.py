"""The `tracekit` command group: a thin skin over the library. Errors are printed here, once."""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from tracekit import __version__
from tracekit.errors import TracekitError

# One module per subcommand under tracekit/commands/, each exposing `command`.
COMMANDS = (
    "ingest",
    "sql",
    "query",
    "report",
    "capture",
    "doctor",
    "diff",
    "check",
    "export",
    "scrub",
    "cache",
)


class TracekitGroup(click.Group):
    """Loads subcommands lazily so `tracekit sql` never pays for importing torch."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name) if cmd_name in COMMANDS else None

    @staticmethod
    def _load(name: str) -> click.Command | None:
        try:
            module = importlib.import_module(f"tracekit.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"tracekit.commands.{name}":
                return None
            raise
        command: click.Command = module.command
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, COMMANDS, n=1, cutoff=0.5)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise click.UsageError(f"no such command '{name}'.{hint}", ctx)
        return super().resolve_command(ctx, args)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Usage errors too are one line on stderr (`Error: ...`, exit 2), not click's block."""
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            if not standalone_mode:
                raise
            hint = ""
            if isinstance(e, click.UsageError) and e.ctx is not None:
                hint = f" (see `{e.ctx.command_path} --help`)"
            message = " ".join(e.format_message().split())
            click.echo(f"Error: {message}{hint}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            if not standalone_mode:
                raise
            click.echo("Error: interrupted", err=True)
            sys.exit(130)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except TracekitError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("Error: interrupted", err=True)
            sys.exit(130)


@click.group(cls=TracekitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(version=__version__, prog_name="tracekit")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """tracekit: where do the milliseconds of a request go?

    Ingest nsys and PyTorch profiler traces, split request latency into stages, operators
    and kernels, and compare runs.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
