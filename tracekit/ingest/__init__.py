"""Ingestors: one module per input format, each filling the normalized tables; the formats
and their contract are registered in `tracekit.ingest.formats`."""

from __future__ import annotations

from pathlib import Path


def detect_format(path: Path) -> str:
    """The name of `path`'s format ('nsys', 'kineto', 'nsys-rep', ...): see formats.py."""
    from tracekit.ingest.formats import detect  # lazy: the registry at first use (start-up)

    return detect(path).name
