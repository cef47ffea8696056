"""One exception tree. The CLI catches TracekitError once and prints `Error: <message>`."""

from __future__ import annotations


class TracekitError(Exception):
    """Base of every error tracekit raises on purpose. Exit code 2 unless said otherwise."""

    exit_code = 2


class TraceFormatError(TracekitError):
    """The input is not a trace tracekit can read, or it is damaged."""


class StoreError(TracekitError):
    """The DuckDB store is missing, corrupt or from an incompatible version."""


class QueryError(TracekitError):
    """A named query is unknown, malformed, or was given bad parameters."""


class ConfigError(TracekitError):
    """A stage mapping, budget or config file is malformed."""


class CaptureFailed(TracekitError):
    """The profiled command could not be run or profiled."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CheckFailed(TracekitError):
    """A budget did not hold (exit code 1, like grep finding nothing)."""

    exit_code = 1
