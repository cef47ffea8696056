"""Run a child process bounded by a wall-clock timeout; kill its whole process group on expiry."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass

KILL_GRACE_S = 15.0


@dataclass(frozen=True)
class ProcessResult:
    returncode: int
    timed_out: bool
    duration_s: float
    tail: str = ""  # last output lines when captured (quiet=True)


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_bounded(
    argv: list[str],
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    quiet: bool = False,
) -> ProcessResult:
    """Run argv in its own session. On timeout: SIGTERM the group (the torch runner then writes
    its trace), SIGKILL after a grace period. A signal death returns 128 + signal number."""
    start = time.monotonic()
    out = subprocess.PIPE if quiet else None
    proc = subprocess.Popen(
        argv, env=env, stdout=out, stderr=subprocess.STDOUT if quiet else None,
        start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        data, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _killpg(proc, signal.SIGTERM)
        try:
            data, _ = proc.communicate(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            _killpg(proc, signal.SIGKILL)
            data, _ = proc.communicate()
    except BaseException:  # Ctrl-C: take the child group down with us
        _killpg(proc, signal.SIGTERM)
        proc.wait()
        raise
    rc = proc.returncode
    if rc < 0:
        rc = 128 - rc
    tail = ""
    if data:
        lines = data.decode(errors="replace").strip().splitlines()
        tail = " | ".join(lines[-3:])
    return ProcessResult(rc, timed_out, time.monotonic() - start, tail)
