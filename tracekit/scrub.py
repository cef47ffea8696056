"""Shareable copies of traces: secrets, environments, command lines, hosts, users removed.

`scrub_trace` detects the format, checks the paths, lets the format's scrubber edit a temp copy
beside OUT (tracekit.ingest.scrubbers says what each removes and how) and renames it into
place; the input is only read."""

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
            # (OSError: on a read-only file system unlink says EROFS, which would replace
            # the error being raised)
            with contextlib.suppress(OSError):
                Path(f"{tmp}{suffix}").unlink()
    return ScrubResult(source, out, fmt.name, {k: v for k, v in removed.items() if v})
