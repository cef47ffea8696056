"""The `tracekit` command group: a thin skin over the library. Errors are printed here, once."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from typing import Any

import click

from tracekit.errors import TracekitError
from tracekit.version import __version__

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


# The first sentence of each command's help (all that a listing shows), so `tracekit --help`
# lists the commands without importing them (tests/test_startup.py holds them equal).
SUMMARIES = {
    "ingest": (
        "Load nsys SQLite exports, .nsys-rep files, Kineto/Chrome JSON traces or folders of "
        "them into DuckDB stores."
    ),
    "sql": (
        "Run SQL (DuckDB's dialect) over traces, run folders, stores or Parquet export folders."
    ),
    "query": "Run a named query from the catalogue (docs/queries.md) over traces or stores.",
    "report": (
        "Write a report: end-to-end latency split by stage, findings, top ops and kernels, GPU "
        "busy/idle and copies, one section per trace (docs/report.md)."
    ),
    "capture": "Run CMD under nsys and/or torch.profiler and write traces + capture.json.",
    "doctor": "Check that this machine can capture and read traces (exit 1 when a trap is found).",
    "diff": (
        "Compare a baseline with a candidate: a headline naming the changes that matter, stage "
        "latency (p50/p90/p99/mean), throughput, GPU busy per device, and ops/kernels compared "
        "per call, each change split into more calls and slower calls, per unit of work."
    ),
    "check": "Hold TRACE to latency budgets.",
    "export": (
        "Export traces or stores as Parquet (hive-partitioned by trace_id) for DuckDB, Spark "
        "SQL or Trino (docs/export.md)."
    ),
    "scrub": (
        "Write a shareable copy of an nsys SQLite export or a Kineto/Chrome JSON trace, without"
        " environment variables, command lines or host names."
    ),
    "cache": "Show or trim the cache of stores built from traces (default: `list`).",
}


class TracekitGroup(click.Group):
    """Loads subcommands lazily so `tracekit sql` never pays for importing torch, and
    `tracekit --help` for importing any of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS
                if importlib.util.find_spec(f"tracekit.commands.{name}") is not None]  # fmt: skip

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(name, click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit))
                for name in names]  # fmt: skip
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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
            click.echo(f"Error: {_one_line(str(e))}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("Error: interrupted", err=True)
            sys.exit(130)
        except Exception as e:
            # A DuckDB error no layer turned into a TracekitError: its first line only (the
            # rest quotes internal SQL). Checked by module, so the CLI need not import duckdb.
            if type(e).__module__.split(".")[0] not in ("duckdb", "_duckdb") or (
                ctx.obj and ctx.obj.get("debug")
            ):
                raise
            from tracekit.store.db_errors import first_line

            click.echo(f"Error: {first_line(e)}", err=True)
            sys.exit(2)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# DuckDB's hints for the user's own SQL keep their own lines (tracekit.store.db_errors).
_HINT_LINE = re.compile(r"\\x0a(?=Candidate bindings:|Did you mean)")


def _one_line(message: str) -> str:
    """An error on one line: control characters from file names or trace text (a newline, ESC)
    shown as \\xNN, except the line breaks before DuckDB's hints."""
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", message)
    return _HINT_LINE.sub("\n", shown)


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
