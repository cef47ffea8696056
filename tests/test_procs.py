"""tests/procs.py, the watch every child of the suite runs under: a child that stops using CPU
fails its test and is killed; one that keeps working is waited for however long it takes."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from tests import procs


def test_a_child_doing_nothing_fails_the_test_and_is_killed() -> None:
    with pytest.raises(AssertionError, match="no CPU progress for 2 s: hung"):
        procs.run(["sleep", "600"], stall_s=2)
    left = []
    for pid in procs._tree_cpu():  # the descendants of this process still there
        with contextlib.suppress(OSError):
            left += [Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert not [c for c in left if c.startswith(b"sleep\0600")]


def test_a_child_that_keeps_working_is_waited_for() -> None:
    # ~3 s of CPU, longer than the stall limit: progress, not wall time, decides
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 3: pass\n"
    done = procs.run([sys.executable, "-c", spin + "print('done')"], capture_output=True,
                     text=True, stall_s=1.5)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "done\n")
