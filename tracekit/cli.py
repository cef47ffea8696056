"""The `tracekit` command group: a thin skin over the library. Errors are printed here, once."""

from __future__ import annotations

import importlib
import sys

import click

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
@click.version_option(package_name="tracekit")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """tracekit: where do the milliseconds of a request go?

    Ingest nsys and PyTorch profiler traces, split request latency into stages, operators
    and kernels, and compare runs.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
