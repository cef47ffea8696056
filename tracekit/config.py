"""Settings every layer reads: where tracekit's cache lives, the name of the per-folder config
file, and how sizes are written in the environment. The bottom layer: imports only errors."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tracekit.errors import ConfigError

CACHE_DIR_ENV = "TRACEKIT_CACHE_DIR"
CONFIG_NAME = "tracekit.toml"  # stage rules and categories beside a trace (docs/report.md)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def cache_dir() -> Path:
    """The cache root, from the environment (read each time: `--cache-dir` may set it)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tracekit"


def read_config(directory: Path | None = None) -> tuple[str, str] | None:
    """(text, path) of tracekit.toml in `directory` (default: the working directory), or None
    when there is none; the one reader of it for stage rules, categories, devices, structures."""
    path = (directory or Path.cwd()) / CONFIG_NAME
    if not path.is_file():
        return None
    try:
        return path.read_text(), str(path)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from None


def parse_size(text: str, what: str = "size") -> int:
    """'500MB', '2G', '1.5GiB', '1048576' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ConfigError(f"{what}: {text!r} is not a size (e.g. 500MB, 2GB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
