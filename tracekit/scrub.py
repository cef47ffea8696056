"""Shareable copies of traces: secrets, environments, command lines, hosts, users removed.

Secrets are found by what they look like (tracekit.redact: token formats, key blocks,
`key=value` with a secret-named key, credentials in URLs) in every string of the file; and by
where they are: environment blocks, command lines, host names, user names and home paths.

nsys SQLite: the input is copied byte for byte to a temp file beside OUT and only the copy is
edited. Its triggers, views and virtual tables are removed from the schema before anything
runs (scrub copies data, never behaviour), then every TEXT cell of every table is scrubbed,
then the nsys-specific places are blanked, then VACUUM so no freed page keeps the old bytes,
then rename onto OUT. Kineto/Chrome JSON: every string at any depth (keys too) is scrubbed;
env-like, host and command-line keys are dropped outside traceEvents. Trace events are never
dropped, so a scrubbed trace ingests to the same event counts.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.atomic import check_input_file, check_output, output_error, prepare, temp_name
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.ingest import formats
from tracekit.ingest.scrubbers import ScrubOptions

__all__ = ["ScrubOptions", "ScrubResult", "scrub_trace"]


@dataclass
class ScrubResult:
    source: Path
    output: Path
    format: str
    removed: dict[str, int] = field(default_factory=dict)


_DEFAULTS = ScrubOptions()


def scrub_trace(
    source: Path, out: Path, options: ScrubOptions = _DEFAULTS, force: bool = False
) -> ScrubResult:
    """Write a scrubbed copy of `source` to `out` atomically; `source` is only read."""
    check_input_file(source)
    fmt = formats.detect(source)
    if str(out) == "-":
        raise TracekitError("scrub writes a file: give an OUT path, not -")
    check_output(out, [source], force)
    prepare(out)
    tmp = temp_name(out)
    removed: Counter[str] = Counter()
    try:
        if fmt.scrub is None:
            readable = ", ".join(f.description for f in formats.FORMATS if f.scrub)
            raise TraceFormatError(f"{source}: scrub reads {readable}; this is {fmt.description}")
        fmt.scrub(source, tmp, options, removed)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except OSError as e:
        raise output_error(out, e) from None
    finally:
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{tmp}{suffix}").unlink()
    return ScrubResult(source, out, fmt.name, {k: v for k, v in removed.items() if v})
