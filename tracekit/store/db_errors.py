"""DuckDB's error text, cut to what a user should see.

DuckDB's messages run to 3-43 lines: the error, then hints, then `LINE n:` with the statement
and a caret. Internal statements are never shown (they quote trace values and tracekit's own
SQL); the hints name what the user meant and are kept for the user's own queries.
"""

from __future__ import annotations

_HINTS = ("Candidate bindings:", "Did you mean")


def first_line(e: BaseException) -> str:
    """The error's first line (its type's name when it has no text)."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def with_hints(e: BaseException) -> str:
    """The first line and DuckDB's hint lines (`Candidate bindings: ...`, `Did you mean
    ...?`), for errors in a query the user wrote; never the `LINE n:` excerpt."""
    lines = [line.strip() for line in str(e).strip().splitlines()]
    hints = [line for line in lines[1:] if line.startswith(_HINTS)]
    return "\n".join([first_line(e), *hints])
