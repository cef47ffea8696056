"""tracekit: where do the milliseconds of a request go?

import tracekit
with tracekit.open("trace.json.gz") as t:
    t.sql("SELECT stage, count(*) FROM stages GROUP BY 1 ORDER BY 1")
"""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.annotate import request, stage  # noqa: E402
from tracekit.errors import (  # noqa: E402
    CaptureFailed,
    CheckFailed,
    ConfigError,
    QueryError,
    StoreError,
    TraceFormatError,
    TracekitError,
)
from tracekit.stages import StageRule, parse_rule  # noqa: E402
from tracekit.traceset import TraceSet, open_traces, write_store  # noqa: E402

open = open_traces  # noqa: A001  (the public name users reach for: tracekit.open)

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
    "open",
    "open_traces",
    "parse_rule",
    "request",
    "stage",
    "write_store",
]
