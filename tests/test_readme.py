"""The README's commands run as written, in order, in a fresh copy of the checkout, and their
output keeps the shape the README shows (tools/readme_tour.py: numbers aside)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import readme_tour  # noqa: E402

BLOCKS = readme_tour.blocks((REPO / "README.md").read_text())


def checkout_copy(dst: Path) -> Path:
    """The files a fresh clone has (tracked, plus new files not ignored): no runs/, no caches."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


@pytest.mark.slow
@pytest.mark.nsys
def test_readme_commands_run_as_written(tmp_path: Path) -> None:
    if shutil.which("nsys") is None or shutil.which("tracekit") is None:
        pytest.skip("the README's captures need nsys and the installed `tracekit` command")
    pytest.importorskip("torch")
    assert len(BLOCKS) >= 8, "the README lost its runnable tour"
    work = checkout_copy(tmp_path / "clone")
    for block in BLOCKS:
        code, out = readme_tour.run(block, work)
        assert code == block.exit_code, f"$ {block.command}\n{out}"
        assert "Traceback" not in out, f"$ {block.command}\n{out}"
        expected = readme_tour.shape(block.output, block.loose)
        assert readme_tour.shape(out, block.loose) == expected, f"$ {block.command}\n{out}"
    assert not list((work / "sample_traces").glob("*.duckdb*"))  # nothing beside inputs


def test_a_capture_nsys_retried_reads_as_its_last_run(tmp_path: Path) -> None:
    """nsys failing to start under load is retried by capture (tracekit.capture); the tour
    compares the last run's output, without nsys's messages and the retry notices before it."""
    from tracekit.capture import NSYS_RETRY_NOTICE

    printed = ["tracekit: a plan notice", "End of file",
               f"tracekit: {NSYS_RETRY_NOTICE} (try 2 of 3)", "Connection reset by peer",
               f"tracekit: {NSYS_RETRY_NOTICE} (try 3 of 3)", "request p50 1.0 ms",
               "Next: tracekit report runs/x"]  # fmt: skip
    command = "printf '%s\\n' " + " ".join(f"'{line}'" for line in printed)
    block = readme_tour.Block(command, "", None, False, 0, (0, 0))
    assert readme_tour.run(block, tmp_path) == (
        0,
        "request p50 1.0 ms\nNext: tracekit report runs/x\n",
    )
    plain = readme_tour.Block(
        "printf 'tracekit: a plan notice\\nok\\n'", "", None, False, 0, (0, 0)
    )
    assert readme_tour.run(plain, tmp_path) == (0, "tracekit: a plan notice\nok\n")
