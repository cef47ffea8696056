"""Child processes for tests, watched by progress instead of a wall-clock timeout.

A loaded 2-core machine can make any honest command take several times its idle wall time, so
a fixed timeout fails good runs (`test_two_ingests_at_once` timed out at 120 s beside other
work). A hung child is one that stops doing anything: the CPU time of the test's whole process
tree (the command, its children, a sibling it waits on) stops changing. `communicate` fails the
test only when nothing in the tree has run for STALL_S seconds; HARD_CAP_S, far beyond any load,
stops a child that spins forever (an nsys agent at full CPU, seen once).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STALL_S = float(os.environ.get("TRACEKIT_TEST_STALL_S", 180))
HARD_CAP_S = float(os.environ.get("TRACEKIT_TEST_HARD_CAP_S", 1200))


def _tree_cpu() -> dict[int, int]:
    """pid -> user+system clock ticks of every live descendant of this process."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        ticks[pid] = int(fields[11]) + int(fields[12])
    me, out = os.getpid(), {}
    for pid in ticks:
        p = pid
        while p in parent and p not in (0, 1, me):
            p = parent[p]
        if p == me and pid != me:
            out[pid] = ticks[pid]
    return out


class ProgressWatch:
    """Fails the test, killing `proc`'s tree, once nothing in this test's process tree has used
    CPU for `stall_s` seconds or the wait has passed HARD_CAP_S. Call `check()` about once a
    second while waiting on the child (its output, its exit, a reply from it)."""

    def __init__(self, proc: subprocess.Popen[Any], stall_s: float = STALL_S) -> None:
        self.proc, self.stall_s = proc, stall_s
        self.started = self.last_change = time.monotonic()
        self.seen = _tree_cpu()

    def check(self) -> None:
        now, tree = time.monotonic(), _tree_cpu()
        if tree != self.seen:
            self.seen, self.last_change = tree, now
        stalled = now - self.last_change > self.stall_s
        if stalled or now - self.started > HARD_CAP_S:
            kill_tree(self.proc)
            self.proc.communicate()
            why = f"no CPU progress for {self.stall_s:.0f} s" if stalled else "over the hard cap"
            raise AssertionError(f"{self.proc.args!r}: {why}: hung") from None


def communicate(
    proc: subprocess.Popen[Any], input: Any = None, stall_s: float = STALL_S
) -> tuple[Any, Any]:
    """proc.communicate(), failing the test only when the process tree makes no progress."""
    watch = ProgressWatch(proc, stall_s)
    while True:
        try:
            return proc.communicate(input, timeout=1.0)
        except subprocess.TimeoutExpired:
            watch.check()


def kill_tree(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL to every descendant of this process, then to `proc`."""
    for pid in sorted(_tree_cpu(), reverse=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.kill()


def run(
    cmd: Sequence[str] | str,
    *,
    input: Any = None,
    check: bool = False,
    capture_output: bool = False,
    stall_s: float = STALL_S,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run() without a timeout: watched by `communicate` instead."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with subprocess.Popen(cmd, **kwargs) as proc:
        out, err = communicate(proc, input, stall_s)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
