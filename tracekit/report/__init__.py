"""`tracekit report`: the library behind it.

    from tracekit.report import write_report
    write_report(["runs/demo"], fmt="html")          # -> runs/demo/report.html

build_report_context (context.py) runs the named queries and lays out one plain object;
render.py turns it into HTML, Markdown or JSON; findings.py holds the rules.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tracekit.errors import TracekitError
from tracekit.slo import ServingOptions
from tracekit.store.stages import StageRule

SUFFIXES = (".json.gz", ".pt.trace.json", ".json", ".sqlite", ".nsys-rep", ".duckdb", ".gz")


def default_output(source: Path, fmt: str) -> Path:
    """`trace.json.gz` -> `trace.report.html` beside it; a run dir -> `RUN_DIR/report.html`;
    in the current folder instead when the input's folder is not writable."""
    ext = {"html": "html", "md": "md", "json": "json"}[fmt]
    if source.is_dir():
        name, folder = "report", source
    else:
        name, folder = source.name, source.parent
        for suffix in SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        name += ".report"
    if not writable_folder(folder):
        folder = Path()
        if source.is_dir():
            name = f"{source.resolve().name}.report"
    return folder / f"{name}.{ext}"


def writable_folder(path: Path) -> bool:
    """Writable, and not marked read-only: root passes os.access even on a `dr-xr-xr-x` folder."""
    try:
        return os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)
    except OSError:
        return False


def write_report(
    sources: Sequence[Path],
    output: Path | None = None,
    fmt: str = "html",
    force: bool = False,
    stage_rules: Sequence[StageRule] | None = None,
    top_n: int = 15,
    engine: str = "duckdb",
    serving: ServingOptions | None = None,
) -> Path:
    """Build the report over traces / run dirs / stores / export folders and write it
    atomically; its path. engine "spark" reads export folders with Spark (tracekit.spark)."""
    # lazy: duckdb, polars and jinja2 load when a report is written, not at import (start-up)
    from tracekit.atomic import check_output, write_text_atomic
    from tracekit.report.context import build_report_context
    from tracekit.report.render import render
    from tracekit.store.traceset import input_files, open_engine

    if not sources:
        raise TracekitError("report: give a trace, run folder or store")
    if output is None:
        if len(sources) > 1:
            raise TracekitError("report: several inputs given; name the output with -o")
        source = Path(sources[0])
        output = default_output(source, fmt)
        if output.parent != (source if source.is_dir() else source.parent):
            print(
                f"tracekit: {source} is in a read-only folder; the report goes to the "
                "current folder",
                file=sys.stderr,
            )
    stdout = str(output) == "-"
    if not stdout:
        # (lexists: False for a name too long, which check_output then names)
        if os.path.lexists(output) and not force and not output.is_symlink():
            raise TracekitError(
                f"{output}: already exists; pass --force to overwrite it or -o to write elsewhere"
            )
        check_output(output, input_files(sources), force)
    with open_engine(engine, list(sources), stage_rules=stage_rules) as ts:
        ctx = build_report_context(ts, [Path(s) for s in sources], top_n=top_n,
                                   serving=serving or ServingOptions())  # fmt: skip
        text = render(ctx, fmt)
    if stdout:
        sys.stdout.write(text)
        return output
    write_text_atomic(output, text)
    return output


__all__ = ["default_output", "write_report"]
