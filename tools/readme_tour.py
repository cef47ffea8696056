"""Run the README's commands: `python tools/readme_tour.py --update` pastes their real output
into README.md; tests/test_readme.py runs them in a fresh copy of the checkout and fails when
an output's shape drifts from what the README shows.

A runnable block is a ```console fence whose first line is `$ COMMAND`; the rest of the fence
is the command's output (stdout and stderr, as a terminal shows them). An HTML comment on the
line before the fence tunes it: `<!-- readme: head=N -->` keeps the first N lines,
`<!-- readme: loose -->` compares only the first line's shape up to its first `(` (timing-ordered
rows, and timings that decide line wrapping or "beyond/within noise"),
`<!-- readme: exit=1 -->` expects that exit code (default 0).
Shape: every absolute path becomes /PATH, every number 0, runs of blanks one blank, runs
of dashes two dashes.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tracekit.capture import NSYS_RETRY_NOTICE

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(
    r"(?:<!-- readme:(?P<opts>[^>]*)-->\n)?```console\n\$ (?P<cmd>[^\n]*)\n(?P<out>.*?)```", re.S
)


@dataclass(frozen=True)
class Block:
    command: str
    output: str
    head: int | None
    loose: bool
    exit_code: int
    span: tuple[int, int]  # of the output inside the README text


def blocks(text: str) -> list[Block]:
    found = []
    for m in FENCE.finditer(text):
        opts = m.group("opts") or ""
        head = re.search(r"head=(\d+)", opts)
        code = re.search(r"exit=(\d+)", opts)
        found.append(Block(m.group("cmd"), m.group("out"), int(head.group(1)) if head else None,
                           "loose" in opts, int(code.group(1)) if code else 0,
                           m.span("out")))  # fmt: skip
    return found


# tracekit capture's notice when nsys failed before the program ran (seen on a loaded machine:
# nsys's daemon or its process waiter) and the run is done again
NSYS_RETRY = f"tracekit: {NSYS_RETRY_NOTICE} (try "


def run(block: Block, cwd: Path) -> tuple[int, str]:
    """Run one command as a user would, in `cwd`; (exit code, output as the README shows it).
    A capture that tracekit ran again because nsys could not start the program is its last
    run's output: nsys's failure message and the notice, printed before it, are left out."""
    res = subprocess.run(block.command, shell=True, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=900)  # fmt: skip
    lines = res.stdout.rstrip("\n").splitlines()
    retried = [i for i, line in enumerate(lines) if line.startswith(NSYS_RETRY)]
    if retried:
        lines = lines[retried[-1] + 1 :]
    if block.head is not None:
        lines = lines[: block.head]
    return res.returncode, "".join(line.rstrip() + "\n" for line in lines)


def shape(text: str, loose: bool = False) -> list[str]:
    lines = text.strip("\n").splitlines()
    if loose:  # timings decide wrapping and "beyond/within noise": keep what precedes them
        lines = [lines[0].split("(")[0]] if lines else []
    out = []
    for line in lines:
        line = re.sub(r"(?<![\w.])/[^\s:]+", "/PATH", line)  # absolute paths vary by machine
        line = re.sub(r"\d+(?:[.,]\d+)*", "0", line)
        line = re.sub(r"-{2,}", "--", line)
        out.append(re.sub(r"\s+", " ", line).strip())
    return out


def update(readme: Path) -> None:
    """Run every block in the checkout and paste its output into the README."""
    text = readme.read_text()
    pieces, last = [], 0
    for block in blocks(text):
        code, out = run(block, REPO)
        if code != block.exit_code:
            sys.exit(f"README: `{block.command}` exited {code}, not {block.exit_code}:\n{out}")
        start, end = block.span
        pieces += [text[last:start], out]
        last = end
    readme.write_text("".join(pieces) + text[last:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--update", action="store_true", help="rewrite README.md's outputs")
    args = ap.parse_args()
    if args.update:
        update(REPO / "README.md")
    else:
        for b in blocks((REPO / "README.md").read_text()):
            print(f"$ {b.command}")


if __name__ == "__main__":
    main()
