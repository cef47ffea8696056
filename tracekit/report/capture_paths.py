"""The capture's paths as a report shows them: relative to the run folder, never a home.

capture.json records the working directory and argv as the capture saw them
(`/home/<user>/proj`, `-o /home/<user>/proj/runs/a`). A report is shared: it shows the run
folder as `.`, the capture's working directory relative to the run folder where the run
folder lies under it, and any other home folder as `/home/<user>`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_HOME = re.compile(r"(/home/|/Users/|/root(?=/|$|\s))([^/\s\"']*)")


def relative_paths(data: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """`data` (capture.json) with its paths rewritten (see the module doc)."""
    run = str(run_dir.resolve())
    cwd = data.get("cwd") if isinstance(data.get("cwd"), str) else None
    swaps: list[tuple[str, str]] = [(run, ".")]
    if cwd and os.path.isabs(cwd) and cwd != "/":
        inside = run == cwd or run.startswith(cwd.rstrip("/") + "/")
        swaps.append((cwd.rstrip("/"), os.path.relpath(cwd, run) if inside else "<cwd>"))

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in swaps:
                value = _swap(value, old, new)
            return _HOME.sub(lambda m: m.group(1) + ("<user>" if m.group(2) else ""), value)
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    return {k: fix(v) for k, v in data.items()}


def _swap(text: str, old: str, new: str) -> str:
    """Replace the path `old` where it is a whole path or a path's leading folders."""
    return re.sub(re.escape(old) + r"(?=/|$|[\s\"'=,])", lambda _m: new, text)
