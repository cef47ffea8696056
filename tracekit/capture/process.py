"""Run a child process bounded by a wall-clock timeout; kill its whole process group on expiry.

The profiled command's own output reaches the terminal; the profilers' chatter (libkineto's
USDT/STAGE lines, nsys's progress bars and "Generated:" paths) is dropped unless verbose.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

KILL_GRACE_S = 15.0

# Whole lines the profilers print into the profiled command's terminal.
TOOL_NOISE = re.compile(
    rb"^\r*(?:(?:USDT|STAGE):\d{4}-\d\d-\d\d .*"  # libkineto profiler_start/stop, stage logs
    rb"|\[W\d* .*(?:kineto|CUPTI|profiler).*"  # torch's profiler warnings
    rb"|Collecting data\.\.\."
    rb"|Generating '.*\.qdstrm'"
    rb"|\[\d+/\d+\] \[.*"  # nsys progress bars (redrawn with \r on one line)
    rb"|Generated:"
    rb"|\s+\S+\.(?:nsys-rep|qdrep|sqlite)"  # the paths listed under "Generated:"
    rb"|Processing events\.\.\.|Saving temporary .*|Creating final output files\.\.\."
    rb"|Processing \[.*|Saved report file to .*|Exporting \d+ events.*"
    rb")\s*$"
)


# nsys failing before the program runs, all seen on a loaded machine with captures at once:
# it cannot reach its own daemon ("Local Endpoint is not available"), its daemon drops the
# session (a bare boost.asio error line, "Connection reset by peer" or "End of file", and exit 1
# after ~0.3 s: 3 in 54 captures, three at a time beside two CPU burners), or its process
# waiter cannot open its semaphore ("[boost::errinfo_api_function_*] = sem_open"). capture runs
# it again only when the program also left no trace of having run and nsys no report.
NSYS_NOT_STARTED = re.compile(
    rb"Local Endpoint is not available|errinfo_api_function_\*\] = sem_open"
    rb"|^(?:Connection reset by peer|End of file)\r?$",
    re.M,
)


@dataclass(frozen=True)
class ProcessResult:
    returncode: int
    timed_out: bool
    duration_s: float
    tail: str = ""  # last output lines when captured (quiet=True)
    nsys_not_started: bool = False  # the output said NSYS_NOT_STARTED


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _forward(source: IO[bytes], sink: IO[bytes], seen: set[str]) -> None:
    """Copy lines from the child to our terminal, dropping the profilers' lines; note in
    `seen` whether nsys said it could not start."""
    for line in iter(source.readline, b""):
        if NSYS_NOT_STARTED.search(line):
            seen.add("nsys_not_started")
        if not TOOL_NOISE.match(line):
            sink.write(line)
            sink.flush()
    source.close()


def _finish(
    proc: subprocess.Popen[bytes], forwarders: list[threading.Thread], timeout: float | None
) -> bytes | None:
    if forwarders:  # they drain the pipes
        proc.wait(timeout=timeout)
        return None
    return proc.communicate(timeout=timeout)[0]


def run_bounded(
    argv: list[str],
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    quiet: bool = False,
    filter_noise: bool = False,
) -> ProcessResult:
    """Run argv in its own session. On timeout: SIGTERM the group (the torch runner then writes
    its trace), SIGKILL after a grace period. A signal death returns 128 + signal number.

    quiet: capture the output (its last lines go into `tail`); filter_noise: pass the output
    through, without the profilers' own lines."""
    start = time.monotonic()
    out: int | None = None
    err: int | None = None
    if quiet:
        out, err = subprocess.PIPE, subprocess.STDOUT
    elif filter_noise:
        out = err = subprocess.PIPE
    proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, start_new_session=True)
    forwarders: list[threading.Thread] = []
    seen: set[str] = set()
    if filter_noise and not quiet:
        assert proc.stdout is not None and proc.stderr is not None
        for src, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
            t = threading.Thread(target=_forward, args=(src, sink, seen), daemon=True)
            t.start()
            forwarders.append(t)
    timed_out = False
    data: bytes | None = None
    try:
        data = _finish(proc, forwarders, timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _killpg(proc, signal.SIGTERM)
        try:
            data = _finish(proc, forwarders, KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            _killpg(proc, signal.SIGKILL)
            data = _finish(proc, forwarders, None)
    except BaseException:  # Ctrl-C: take the child group down with us
        _killpg(proc, signal.SIGTERM)
        proc.wait()
        raise
    for t in forwarders:
        t.join(timeout=5)
    rc = proc.returncode
    if rc < 0:
        rc = 128 - rc
    tail = ""
    if data:
        lines = data.decode(errors="replace").strip().splitlines()
        tail = " | ".join(lines[-3:])
    not_started = "nsys_not_started" in seen or bool(data and NSYS_NOT_STARTED.search(data))
    return ProcessResult(rc, timed_out, time.monotonic() - start, tail, not_started)
