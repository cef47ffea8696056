"""Child side: record through a torch.profiler the program starts itself.

torch keeps one profiler session per process. A program that runs its own
`torch.profiler.profile` while the capture runner's is active ends the runner's session
under it, and exporting the runner's trace then crashes the process (SIGSEGV, exit 139).

The guard wraps `torch.autograd.profiler.profile` (the session under both torch.profiler
and the legacy API): when the program starts a session of its own, the runner's profiler
stops first (its partial trace is dropped) and stands aside for the rest of the run. The
capture's torch trace is the program's first recorded session: copied from the file the
program exports it to, or exported at the end of the run when the program never did (a
session's results can be saved once only). Later sessions are counted. The program's
profiler, schedule and `on_trace_ready` handler run as written. Each step is said on stderr.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _say(msg: str) -> None:
    print(f"tracekit: {msg}", file=sys.stderr, flush=True)


def export_trace(prof: Any, out: Path) -> None:
    """Write a profiler's Chrome trace to `out` (temp file + rename, mode 0644 at most)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    prof.export_chrome_trace(str(tmp))
    os.chmod(tmp, 0o644 & ~_umask())  # nsys runs the child with umask 0: no world-writable trace
    os.replace(tmp, out)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask | 0o022


class ProfilerGuard:
    """Tracks the runner's own profiler and the program's; see the module doc."""

    def __init__(self, trace: Path, on_aside: Callable[[], None]) -> None:
        self.trace = trace
        self._on_aside = on_aside  # unbinds the runner's profiler from tracekit.request()
        self.ours: Any = None  # the runner's torch.profiler.profile
        self.aside = False  # the program runs its own profiler: the runner's never (re)starts
        self.first: Any = None  # the program's first session that recorded
        self.written = False  # its trace is at `trace`
        self.extra = 0  # later traces of the program's profiler, not copied
        self.live: dict[int, Any] = {}  # the program's sessions now recording, by id
        self._restore: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        from torch.autograd import profiler as autograd_profiler

        cls = autograd_profiler.profile
        prepare: Any = cls._prepare_trace
        leave: Any = cls.__exit__
        export: Any = cls.export_chrome_trace
        guard = self

        def _prepare_trace(session: Any) -> Any:
            if not guard._is_ours(session):
                guard._program_starts(session)
            return prepare(session)

        def __exit__(session: Any, *exc: Any) -> Any:
            result = leave(session, *exc)
            if not guard._is_ours(session) and id(session) in guard.live:
                guard._program_stopped(session)
            return result

        def export_chrome_trace(session: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            result = export(session, path, *args, **kwargs)
            if session is guard.first and not guard.written:
                guard._copy(Path(path))
            return result

        self._restore = [(cls, "_prepare_trace", prepare), (cls, "__exit__", leave),
                         (cls, "export_chrome_trace", export)]  # fmt: skip
        for name, wrapper in (("_prepare_trace", _prepare_trace), ("__exit__", __exit__),
                              ("export_chrome_trace", export_chrome_trace)):  # fmt: skip
            setattr(cls, name, wrapper)

    def uninstall(self) -> None:
        for cls, name, orig in self._restore:
            setattr(cls, name, orig)
        self._restore = []

    def may_start(self) -> bool:
        """False when the program runs (or ran) its own profiler: the runner's stays off."""
        if self.aside or self.live:
            self.aside = True
            return False
        return True

    def export_ours(self, prof: Any) -> None:
        if not self.aside:
            export_trace(prof, self.trace)

    def finish(self) -> None:
        """Write the program's first trace if it never exported it; say what became of it.
        A session the program left recording (start() without stop()) is stopped here: the
        program has ended. Uninstalls the guard first (our own export must not be taken for
        the program's)."""
        self.uninstall()
        if self.first is None and self.live:
            session = next(iter(self.live.values()))
            try:
                session.__exit__(None, None, None)
            except Exception as e:
                _say(f"could not stop the program's torch.profiler: {e}")
            else:
                self.first = session if session.kineto_results is not None else None
                _say("the program's torch.profiler was still recording when it ended: stopped")
        if self.first is not None and not self.written:
            try:
                export_trace(self.first, self.trace)
                self.written = True
            except Exception as e:
                _say(f"could not write the program's torch trace: {e}")
        if self.extra:
            _say(
                f"the program's torch.profiler recorded {self.extra + 1} traces; "
                f"{self.trace.name} is a copy of the first"
            )

    def _is_ours(self, session: Any) -> bool:
        return self.ours is not None and getattr(self.ours, "profiler", None) is session

    def _program_starts(self, session: Any) -> None:
        self.live[id(session)] = session
        if self.aside:
            return
        self.aside = True
        ours, self.ours = self.ours, None
        self._on_aside()
        if ours is not None:
            try:
                self.ours = ours  # still ours while it stops (its session's exit is skipped)
                ours.stop()
            except Exception as e:  # a profiler that fails to stop must not stop the program
                _say(f"stopping tracekit's torch.profiler failed: {e}")
            finally:
                self.ours = None
        _say(
            "the program starts its own torch.profiler: tracekit's stands aside and records "
            f"through it ({self.trace.name} will be a copy of the program's trace)"
        )

    def _program_stopped(self, session: Any) -> None:
        self.live.pop(id(session), None)
        if getattr(session, "kineto_results", None) is None:
            return
        if self.first is None:
            self.first = session
        else:
            self.extra += 1

    def _copy(self, exported: Path) -> None:
        tmp = self.trace.with_name(f".{self.trace.name}.{os.getpid()}.tmp")
        try:
            shutil.copyfile(exported, tmp)
            os.chmod(tmp, 0o644 & ~_umask())
            os.replace(tmp, self.trace)
        except OSError as e:
            _say(f"could not copy the program's torch trace from {exported.name}: {e}")
            tmp.unlink(missing_ok=True)
            return
        self.written = True
