"""tracekit's cache directory: stores built from traces, nsys exports, scratch files.

Nothing is ever written beside an input: a trace's folder is often read-only, shared, a git
checkout or a folder other tools glob. The cache lives in `$TRACEKIT_CACHE_DIR`, else
`$XDG_CACHE_HOME/tracekit`, else `~/.cache/tracekit` (`--cache-dir` on the commands that
ingest sets the first). A store's file name is keyed by the input's resolved path; its
freshness by the input's identity (device, inode, size, mtime, ctime), so a changed, moved
or replaced input never reuses a stale store. Reuse touches a store's mtime, which is what
least-recently-used eviction orders by.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracekit.atomic import folder_for
from tracekit.config import CACHE_DIR_ENV, cache_dir, parse_size
from tracekit.errors import StoreError

__all__ = ["CACHE_DIR_ENV", "cache_dir", "folder_for", "parse_size"]  # re-exported: homes are
# tracekit.config and tracekit.atomic

MAX_SIZE_ENV = "TRACEKIT_CACHE_MAX_SIZE"
DEFAULT_MAX_SIZE = 20 * 1024**3
STORE_SUFFIX = ".duckdb"
_STORES = "stores"
_NAME_MAX = 96  # bytes of the input's name kept in a store's name (file names stop at 255)


def set_cache_dir(path: Path) -> None:
    """Use `path` for this process and the workers it starts."""
    os.environ[CACHE_DIR_ENV] = str(Path(path).expanduser().resolve())


def store_path_for(source: Path) -> Path:
    """Where the store of the trace `source` is cached."""
    resolved = source.resolve()
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:20]
    name = os.fsencode(resolved.name)[:_NAME_MAX].decode(errors="ignore")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return cache_dir() / _STORES / f"{digest}-{safe}{STORE_SUFFIX}"


def temp_beside(out: Path) -> tuple[int, Path]:
    """A new temp file in `out`'s folder (mkstemp), for a store written then renamed to out;
    a folder that cannot be written (read-only file system, /proc) is one StoreError."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as e:
        raise StoreError(f"{out}: cannot write a store there ({e.strerror or e})") from None
    return fd, Path(name)


def source_identity(source: Path) -> dict[str, str]:
    """What says that a file is still the same file: a replaced file (new inode, ctime) or
    an edited one (size, mtime) gets a new identity."""
    st = source.stat()
    return {
        "source_path": str(source.resolve()),
        "source_dev_ino": f"{st.st_dev}:{st.st_ino}",
        "source_size": str(st.st_size),
        "source_mtime_ns": str(st.st_mtime_ns),
        "source_ctime_ns": str(st.st_ctime_ns),
    }


def touch(path: Path) -> None:
    """Mark a store as just used (least-recently-used eviction reads mtime)."""
    with contextlib.suppress(OSError):
        os.utime(path)


@dataclass(frozen=True)
class CacheEntry:
    """One cached file: a store or an nsys export."""

    path: Path
    size: int
    last_used: float


def entries() -> list[CacheEntry]:
    """Every cached file, least recently used first (temp files of live builds excluded)."""
    root = cache_dir()
    found = []
    for p in _walk(root):
        if p.name.startswith("."):
            continue
        with contextlib.suppress(OSError):
            st = p.stat()
            found.append(CacheEntry(p, st.st_size, st.st_mtime))
    return sorted(found, key=lambda e: (e.last_used, str(e.path)))


def _walk(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        return
    for sub in sorted(root.iterdir()):
        if sub.is_dir() and not sub.is_symlink():
            yield from (p for p in sorted(sub.iterdir()) if p.is_file() and not p.is_symlink())


def total_size() -> int:
    return sum(e.size for e in entries())


def clear() -> tuple[int, int]:
    """Remove every cached file; (files, bytes) removed."""
    removed = [e for e in entries() if _unlink(e.path)]
    return len(removed), sum(e.size for e in removed)


def prune(max_bytes: int, keep: Path | None = None) -> tuple[int, int]:
    """Remove least recently used files until the cache holds at most `max_bytes` (never
    `keep`, the store just built)."""
    items = [e for e in entries() if keep is None or e.path != keep]
    excess = sum(e.size for e in items) - max_bytes
    removed: list[CacheEntry] = []
    for e in items:
        if excess <= 0:
            break
        if _unlink(e.path):
            removed.append(e)
            excess -= e.size
    return len(removed), sum(e.size for e in removed)


def prune_to_configured_max(keep: Path | None = None) -> None:
    """After a build: keep the cache within TRACEKIT_CACHE_MAX_SIZE (default 20 GiB)."""
    configured = os.environ.get(MAX_SIZE_ENV)
    limit = parse_size(configured, MAX_SIZE_ENV) if configured else DEFAULT_MAX_SIZE
    prune(limit, keep)


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    return True


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def age(seconds_since_epoch: float) -> str:
    """'3 min ago'-style age of a time stamp."""
    delta = max(time.time() - seconds_since_epoch, 0)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if delta >= span:
            return f"{delta // span:.0f} {unit} ago"
    return "just now"
