"""Safe file output: outputs never alias inputs, never go through links or into special files,
and appear complete or not at all (a temporary file beside the target, then a rename).

Temporary names carry the writer's pid (`.NAME.<pid>.<random>.tmp`), so a later run sweeps
what a killed one (kill -9, power loss) left behind: a temp whose pid is not alive.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from tracekit.errors import StoreError, TracekitError

NAME_MAX = 255


def check_input_file(path: Path) -> None:
    """Refuse special files (FIFO, device, socket) as inputs: reading one may block forever."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # (the reader names what is wrong)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise TracekitError(f"{path}: not a regular file (a FIFO, device or socket); give a file")


def _holds(folder: Path, path: Path) -> bool:
    return folder == path or folder in path.parents


def check_output(out: Path, inputs: Iterable[Path], force: bool, folder: bool = False) -> None:
    """Raise unless `out` may be written: not an input nor a folder holding one (with or
    without `force`), not a link, not a special file, a folder only when `folder`, and
    an existing output only with `force`."""
    name = os.fsencode(out.name)
    if len(name) > NAME_MAX:
        raise TracekitError(f"{out}: file name longer than {NAME_MAX} bytes")
    target = Path(os.path.abspath(out))
    resolved = target.parent.resolve() / target.name
    for raw in inputs:
        src = Path(os.path.abspath(raw))
        try:
            real = src.resolve()
        except (OSError, RuntimeError):  # (a link loop)
            real = src
        for candidate in {src, real}:
            if _holds(resolved, candidate) or _holds(target, candidate):
                what = (
                    "is an input"
                    if resolved == candidate or target == candidate
                    else ("holds an input")
                )
                raise TracekitError(f"{out}: {what} ({raw}); write the output elsewhere")
        with contextlib.suppress(OSError):
            if os.path.lexists(out) and os.path.samefile(out, raw):
                raise TracekitError(f"{out}: is an input ({raw}); write the output elsewhere")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise TracekitError(f"{out}: a folder above it is a file") from None
    except OSError as e:
        raise TracekitError(f"{out}: cannot write here ({e.strerror})") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise TracekitError(f"{out}: is a symbolic link; tracekit never writes through one")
        if folder and not stat.S_ISDIR(st.st_mode):
            raise TracekitError(f"{out}: exists and is not a folder")
        if not folder and not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise TracekitError(f"{out}: is {kind}; give a file path")
        if not force:
            raise TracekitError(f"{out}: exists; pass --force to overwrite it")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise TracekitError(f"{out}: a folder above it ({parent}) is a file")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(path: Path) -> None:
    """Remove temporaries of `path` left by writers that are no longer alive."""
    with contextlib.suppress(OSError):
        for p in path.parent.glob(f".{glob.escape(path.name)}.*.tmp*"):
            parts = p.name[len(path.name) + 2 :].split(".")
            if not parts or not parts[0].isdigit() or _pid_alive(int(parts[0])):
                continue
            with contextlib.suppress(OSError):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()


def temp_name(path: Path) -> Path:
    """A fresh temporary name beside `path` (not created)."""
    return path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def prepare(path: Path) -> None:
    """Create `path`'s folder and sweep dead writers' temporaries there."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(path, e) from None
    sweep_stale(path)


def output_error(path: Path, e: OSError) -> TracekitError:
    """One line for an OSError met while writing `path` (disk full, read-only, too long)."""
    why = {
        errno.ENOSPC: "no space left on the device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ENAMETOOLONG: "file name too long",
        errno.ENOTDIR: "a folder above it is a file",
        errno.EISDIR: "is a folder",
    }.get(e.errno or 0, e.strerror or str(e))
    return TracekitError(f"{path}: cannot write ({why})")


@contextlib.contextmanager
def atomic_output(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """Yield a file handle; the target appears complete or not at all."""
    prepare(path)
    tmp = temp_name(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise output_error(path, e) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8",
                       errors=None if binary else "surrogateescape") as fh:  # fmt: skip
            yield fh
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise output_error(path, e) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_output(path) as fh:
        fh.write(text)


def make_temp_dir(path: Path) -> Path:
    """A temporary folder beside `path` (see sweep_stale)."""
    prepare(path)
    tmp = temp_name(path)
    try:
        tmp.mkdir()
    except OSError as e:
        raise output_error(path, e) from None
    return tmp


__all__ = [
    "atomic_output",
    "check_input_file",
    "check_output",
    "folder_for",
    "make_temp_dir",
    "output_error",
    "prepare",
    "sweep_stale",
    "temp_name",
    "write_text_atomic",
]


@contextlib.contextmanager
def folder_for(path: Path) -> Iterator[None]:
    """`mkdir -p path` for the block; when the block fails (or is interrupted), the folders
    it created and left empty are removed again: a failed ingest leaves no empty `stores/`."""
    created: list[Path] = []
    p = path
    while not p.exists() and not p.is_symlink() and p != p.parent:
        created.append(p)
        p = p.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"{path}: cannot create the folder ({e.strerror or e})") from None
    try:
        yield
    except BaseException:
        for d in created:  # innermost first; stops at the first one that is not empty
            try:
                d.rmdir()
            except OSError:
                break
        raise
