"""tracekit: where do the milliseconds of a request go?

import tracekit
with tracekit.open("trace.json.gz") as t:
    t.sql("SELECT stage, count(*) FROM stages GROUP BY 1 ORDER BY 1")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.annotate import batch, request, stage  # noqa: E402
from tracekit.errors import (  # noqa: E402
    CaptureFailed,
    CheckFailed,
    ConfigError,
    QueryError,
    StoreError,
    TraceFormatError,
    TracekitError,
)
from tracekit.store.stages import StageRule, parse_rule  # noqa: E402
from tracekit.version import __version__

if TYPE_CHECKING:
    from tracekit.store.traceset import TraceSet, open_traces, write_store

    open = open_traces  # noqa: A001  (the public name users reach for: tracekit.open)

# Imported at first use (PEP 562): tracekit.store.traceset pulls in DuckDB, which `tracekit --help`
# and `import tracekit` for tracekit.stage() in a user's script never need.
_LAZY = {"TraceSet": "TraceSet", "open": "open_traces", "open_traces": "open_traces",
         "write_store": "write_store"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from tracekit.store import traceset

        value = getattr(traceset, _LAZY[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")


__all__ = [
    "CaptureFailed",
    "CheckFailed",
    "ConfigError",
    "QueryError",
    "StageRule",
    "StoreError",
    "TraceFormatError",
    "TraceSet",
    "TracekitError",
    "__version__",
    "batch",
    "open",
    "open_traces",
    "parse_rule",
    "request",
    "stage",
    "write_store",
]
