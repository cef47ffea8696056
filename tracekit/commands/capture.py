"""`tracekit capture [options] -- CMD ARGS...`: record traces of one command into a run folder."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.commands.options import force_option
from tracekit.errors import ConfigError


def _schedule(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    parts = text.split(",")
    try:
        wait, warmup, active = (int(p) for p in parts)
    except ValueError:
        raise ConfigError(
            f"--schedule: expected WAIT,WARMUP,ACTIVE integers, got {text!r}"
        ) from None
    if min(wait, warmup) < 0 or active < 1:
        raise ConfigError("--schedule: WAIT and WARMUP must be >= 0 and ACTIVE >= 1")
    return wait, warmup, active


@click.command(
    "capture",
    context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False},
)
@click.option("-o", "--output", "run_dir", type=click.Path(path_type=Path),
              help="Run folder to write (default: runs/<timestamp>).")  # fmt: skip
@click.option(
    "--nsys/--no-nsys",
    default=True,
    show_default=True,
    help="Trace with Nsight Systems (skipped with a notice when nsys is absent).",
)
@click.option("--torch/--no-torch", "use_torch", default=True, show_default=True,
              help="Trace Python commands with torch.profiler.")  # fmt: skip
@click.option("--schedule", metavar="WAIT,WARMUP,ACTIVE",
              help="torch.profiler schedule, counted in requests (tracekit.request() or "
              "--request) after the --warmup ones.")  # fmt: skip
@click.option("--stage", "stages", multiple=True, metavar="NAME=module:function",
              help="Wrap a function in a stage without editing the code (repeatable; "
              "__main__ or the script's stem names the script itself).")  # fmt: skip
@click.option(
    "--request",
    "requests",
    multiple=True,
    metavar="module:function",
    help="Each call of this function is one request (no code change; repeatable).",
)
@click.option(
    "--batch",
    "batches",
    multiple=True,
    metavar="module:function",
    help="With --request: each call of this function is a batch serving the requests whose "
    "objects it receives in a list or tuple argument (no code change).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="The first N requests are warm-up: served, recorded nowhere; "
    "--schedule counts the requests after them.",
)
@click.option(
    "--python",
    "python_stacks",
    is_flag=True,
    help="Record Python function events (torch.profiler with_stack): what runs "
    "inside CPU stages; slows Python-heavy code, see docs/capture.md.",
)
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop collecting after SECONDS (the command is then ended).")  # fmt: skip
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Kill a run (profiler included) that takes longer than SECONDS.")  # fmt: skip
@force_option
@click.option("-v", "--verbose", is_flag=True,
              help="Show the profilers' own output (nsys progress, libkineto lines).")  # fmt: skip
@click.option("--allow-empty", is_flag=True,
              help="Exit 0 when nsys recorded none of the program's stage ranges.")  # fmt: skip
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    run_dir: Path | None,
    nsys: bool,
    use_torch: bool,
    schedule: str | None,
    stages: tuple[str, ...],
    requests: tuple[str, ...],
    batches: tuple[str, ...],
    warmup: int,
    python_stacks: bool,
    duration: float | None,
    timeout: float | None,
    force: bool,
    verbose: bool,
    allow_empty: bool,
    command: tuple[str, ...],
) -> None:
    """Run CMD under nsys and/or torch.profiler and write traces + capture.json.

    Everything after `--` is passed to the command untouched; tracekit exits with its exit
    code, and keeps the traces when it fails.

        tracekit capture -o runs/base -- python examples/infer.py --requests 24
    """
    from tracekit.capture import CaptureOptions, capture, default_run_dir, parse_target
    from tracekit.capture.stage_hooks import parse_batch_target, parse_request_target

    if batches and not requests:
        raise ConfigError("--batch needs --request: a batch serves the requests it receives")

    opts = CaptureOptions(
        command=tuple(command),
        run_dir=run_dir or default_run_dir(),
        nsys=nsys,
        torch=use_torch,
        schedule=_schedule(schedule),
        stages=tuple(parse_target(s) for s in stages),
        requests=tuple(parse_request_target(r) for r in requests)
        + tuple(parse_batch_target(b) for b in batches),
        warmup=warmup,
        python_stacks=python_stacks,
        duration=duration,
        timeout=timeout,
        force=force,
        verbose=verbose,
        allow_empty=allow_empty,
    )
    result = capture(opts)
    traces = [f["path"] for f in result.files if f["role"] in ("nsys-sqlite", "torch-trace")]
    if result.stage_clock:
        click.echo(f"Recorded {result.stage_clock}")
    click.echo(f"Wrote {result.manifest} ({', '.join(traces) or 'no traces'})")
    if traces:  # never point at a report that would fail
        click.echo(f"Next: tracekit report {result.run_dir}")
    if result.exit_code != 0:
        click.echo(f"tracekit: the command exited with {result.exit_code}", err=True)
    sys.exit(result.exit_code)
