"""Bad inputs through the real CLI (`python -m tracekit`): each fails cleanly or ingests.

A clean failure is: exit code 2, exactly one stderr line, starting `Error: ` and naming the
file, no traceback, nothing left beside the input (no store, cache, lock or temp file), and
the input's bytes and mtime unchanged. Events with bad times are not a failure: the trace
ingests and the bad events are counted as skipped.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import procs
from tests.conftest import REPO, shared_traces

NSYS_INGESTOR = REPO / "tracekit" / "ingest" / "nsys.py"
needs_nsys = pytest.mark.skipif(
    not NSYS_INGESTOR.exists(), reason="tracekit/ingest/nsys.py is not written yet"
)
KINETO = shared_traces("kineto_gp100_*.json.gz")
NSYS = shared_traces("nsys_2022.4_cpu_nvtx_osrt_example.sqlite")
needs_kineto = pytest.mark.skipif(not KINETO, reason="no shared Kineto trace")
needs_nsys_trace = pytest.mark.skipif(not NSYS, reason="no shared nsys export")
COMMANDS = ("ingest", "sql")
HUGE_BYTES = 200 * 1024 * 1024  # 1 GB would cost ~10 s and 2 GB RSS: 200 MB shows the path


def tracekit(*args: str, user: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [*(user or []), sys.executable, "-m", "tracekit", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return procs.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)


def cli_args(command: str, path: Path) -> list[str]:
    return ["ingest", str(path)] if command == "ingest" else ["sql", str(path), "SELECT 1"]


def snapshot(path: Path) -> tuple[list[str], dict[str, tuple[bytes, int]]]:
    """Names in the input's folder, and (bytes, mtime) of every file there."""
    folder = path if path.is_dir() else path.parent
    names = sorted(p.name for p in folder.iterdir())
    data = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()}
    return names, data


def assert_clean_failure(path: Path, command: str, **kw: object) -> str:
    before = snapshot(path)
    r = tracekit(*cli_args(command, path), **kw)  # type: ignore[arg-type]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: "), r.stderr
    assert path.name in lines[0], r.stderr
    assert snapshot(path) == before, "the input's folder or bytes changed"
    return lines[0]


# --- cases: each writes one input into its own folder ------------------------------------


def _kineto_bytes() -> bytes:
    return gzip.decompress(KINETO[0].read_bytes())


def make_empty(d: Path) -> Path:
    (d / "empty.json").write_bytes(b"")
    return d / "empty.json"


def make_random(d: Path) -> Path:
    (d / "random.json").write_bytes(bytes(range(256)) * 64 + os.urandom(4096))
    return d / "random.json"


def make_truncated_json(d: Path) -> Path:
    data = _kineto_bytes()
    (d / "trunc.json").write_bytes(data[: len(data) // 2])
    return d / "trunc.json"


def make_truncated_gzip(d: Path) -> Path:
    data = KINETO[0].read_bytes()
    (d / "trunc.json.gz").write_bytes(data[: len(data) // 2])
    return d / "trunc.json.gz"


def make_no_trace_events(d: Path) -> Path:
    (d / "noevents.json").write_bytes(b'{"schemaVersion": 1, "deviceProperties": []}')
    return d / "noevents.json"


def make_events_not_list(d: Path) -> Path:
    (d / "notlist.json").write_bytes(b'{"traceEvents": {"ph": "X", "ts": 1, "dur": 2}}')
    return d / "notlist.json"


def make_events_string(d: Path) -> Path:
    (d / "strlist.json").write_bytes(b'{"traceEvents": "none"}')
    return d / "strlist.json"


def make_huge_line(d: Path) -> Path:
    """One 200 MB line that ends inside an event's name (written lazily, 1 MiB at a time)."""
    p = d / "huge.json"
    with open(p, "wb") as f:
        f.write(b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "name": "')
        block = b"x" * (1 << 20)
        for _ in range(HUGE_BYTES >> 20):
            f.write(block)
    return p


def make_not_nsys(d: Path) -> Path:
    p = d / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE people (name TEXT, age INTEGER)")
    con.execute("INSERT INTO people VALUES ('a', 1)")
    con.commit()
    con.close()
    return p


def make_truncated_sqlite(d: Path) -> Path:
    data = NSYS[0].read_bytes()
    (d / "trunc.sqlite").write_bytes(data[: len(data) // 3])
    return d / "trunc.sqlite"


def make_no_string_ids(d: Path) -> Path:
    p = d / "nostrings.sqlite"
    shutil.copyfile(NSYS[0], p)
    con = sqlite3.connect(p)
    con.execute("DROP TABLE StringIds")
    con.commit()
    con.close()
    return p


def make_empty_dir(d: Path) -> Path:
    (d / "run").mkdir()
    (d / "run" / "notes.txt").write_text("no traces here\n")
    return d / "run"


CASES: list[tuple[str, Callable[[Path], Path], list[pytest.MarkDecorator]]] = [
    ("empty", make_empty, []),
    ("random_bytes", make_random, []),
    ("truncated_json", make_truncated_json, [needs_kineto]),
    ("truncated_gzip", make_truncated_gzip, [needs_kineto]),
    ("no_trace_events", make_no_trace_events, []),
    ("trace_events_object", make_events_not_list, []),
    ("trace_events_string", make_events_string, []),
    ("huge_single_line", make_huge_line, []),
    ("sqlite_not_nsys", make_not_nsys, [needs_nsys]),
    ("truncated_sqlite", make_truncated_sqlite, [needs_nsys, needs_nsys_trace]),
    ("no_string_ids", make_no_string_ids, [needs_nsys, needs_nsys_trace]),
    ("dir_without_traces", make_empty_dir, []),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "make", [pytest.param(m, id=name, marks=marks) for name, m, marks in CASES]
)
def test_bad_input_fails_cleanly(tmp_path: Path, make: Callable[[Path], Path], command: str):
    path = make(tmp_path)
    assert_clean_failure(path, command)


def test_missing_file_fails_cleanly(tmp_path: Path):
    for command in COMMANDS:
        r = tracekit(*cli_args(command, tmp_path / "nope.json"))
        assert r.returncode == 2 and r.stderr.startswith("Error: ") and "nope.json" in r.stderr
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


@needs_nsys
@needs_nsys_trace
@pytest.mark.parametrize("command", COMMANDS)
def test_locked_sqlite_fails_cleanly(tmp_path: Path, command: str):
    path = tmp_path / "locked.sqlite"
    shutil.copyfile(NSYS[0], path)
    # Snapshot before locking: closing any file of ours on it would drop SQLite's POSIX lock.
    before = snapshot(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        line = assert_clean_failure_no_snapshot(path, command)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "lock" in line.lower()
    assert snapshot(path) == before


def assert_clean_failure_no_snapshot(path: Path, command: str) -> str:
    r = tracekit(*cli_args(command, path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and path.name in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


BAD_EVENTS = (
    b'{"traceEvents": ['
    b'{"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 5},'
    b'{"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 1, "dur": 5},'
    b'{"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 1, "tid": 1, "ts": 10},'
    b'{"ph": "X", "cat": "cpu_op", "name": "neg_ts", "pid": 1, "tid": 1, "ts": -4, "dur": 5},'
    b'{"ph": "X", "cat": "cpu_op", "name": "neg_dur", "pid": 1, "tid": 1, "ts": 10, "dur": -1},'
    b'{"ph": "X", "cat": "cpu_op", "name": "nan_ts", "pid": 1, "tid": 1, "ts": NaN, "dur": 5},'
    b'{"ph": "X", "cat": "cpu_op", "name": "inf_d", "pid": 1, "tid": 1, "ts": 1, "dur": Infinity},'
    b'{"ph": "X", "cat": "cpu_op", "name": "str_ts", "pid": 1, "tid": 1, "ts": "12", "dur": 5},'
    b'{"ph": "X", "cat": "cpu_op", "name": "str_dur", "pid": 1, "tid": 1, "ts": 1, "dur": "x"},'
    b'{"ph": "X", "cat": "kernel", "name": "odd_ids", "pid": "gpu", "tid": [1], "ts": 20,'
    b' "dur": 1, "args": {"stream": "seven", "device": null, "correlation": "3"}},'
    b'{"ph": "X", "cat": 7, "name": 8, "pid": true, "tid": 1.5, "ts": 30, "dur": 1,'
    b' "args": [1, 2]},'
    b'5, "text", null, [1, 2]'
    b"]}"
)


def test_bad_events_are_skipped_and_counted(tmp_path: Path):
    path = tmp_path / "bad_events.json"
    path.write_bytes(BAD_EVENTS)
    mtime = path.stat().st_mtime_ns
    r = tracekit("ingest", str(path))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    line = r.stdout.strip()
    assert line.startswith(f"{path}: 3 events, 12 skipped: "), line
    for reason in ("4 not an object", "1 negative ts", "1 negative dur", "non-finite ts"):
        assert reason in line, line
    r = tracekit("sql", str(path), "SELECT count(*) AS n FROM events", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["n", "3"]
    assert path.read_bytes() == BAD_EVENTS and path.stat().st_mtime_ns == mtime
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["bad_events.json"]  # the store is in the cache dir, not beside


NOBODY = 65534


def run_cli_as_nobody(args: list[str], cache_dir: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a forked child that dropped root for `nobody`: as root, mode 000 blocks
    nothing, and CI runs as root. The modules are imported before the fork, so the child
    needs no access to the interpreter's (private) install."""
    import tracekit.commands.ingest
    import tracekit.commands.query
    import tracekit.commands.report
    import tracekit.commands.sql
    import tracekit.report.context
    import tracekit.report.render  # noqa: F401
    from tracekit.cli import main

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            os.environ["TRACEKIT_CACHE_DIR"] = str(cache_dir)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                main(args, prog_name="tracekit")
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:  # shown to the test: the point is that there is none
                traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r) as fo, os.fdopen(err_r) as fe:
        stdout, stderr = fo.read(), fe.read()
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), stdout, stderr)


@pytest.mark.parametrize("command", [*COMMANDS, "report", "query"])
@pytest.mark.parametrize("what", ["file", "folder"])
def test_unreadable_input_fails_in_one_line(tmp_path: Path, command: str, what: str):
    """Mode 000 on the trace, or on the folder holding it: one line naming it, exit 2, also
    for a user who is not root (forked and dropped to `nobody` when the tests run as root)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "secret.json"
    path.write_bytes(BAD_EVENTS)
    locked = path if what == "file" else folder
    args = {"ingest": ["ingest", str(path)], "sql": ["sql", str(path), "SELECT 1"],
            "report": ["report", str(path), "-o", str(tmp_path / "r.html")],
            "query": ["query", "top_ops", str(path)]}[command]  # fmt: skip
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir(mode=0o777)
    cache_dir.chmod(0o777)
    tmp_path.chmod(0o777)
    for parent in tmp_path.parents:
        if parent != Path("/"):
            parent.chmod(parent.stat().st_mode | 0o111)
    locked.chmod(0)
    try:
        if os.geteuid() == 0:
            r = run_cli_as_nobody(args, cache_dir)
        else:
            r = tracekit(*args)
    finally:
        locked.chmod(0o755)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    assert "secret.json" in lines[0] or "traces" in lines[0], r.stderr
    assert "permission denied" in lines[0] or "not readable" in lines[0], r.stderr
    assert path.read_bytes() == BAD_EVENTS


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["reprot", "x"], "Error: no such command 'reprot'. Did you mean 'report'? "
                          "(see `tracekit --help`)"),
        (["frobnicate"], "Error: no such command 'frobnicate'. (see `tracekit --help`)"),
        (["sql", "--frmat", "csv", "t.json", "SELECT 1"],
         "Error: No such option '--frmat'. Did you mean '--format'? (see `tracekit sql --help`)"),
        (["sql"], "Error: Missing argument 'SOURCE...'. (see `tracekit sql --help`)"),
        (["cache", "prune"], "Error: Missing option '--max-size'. "
                             "(see `tracekit cache prune --help`)"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_with_a_suggestion(args: list[str], expected: str) -> None:
    from click.testing import CliRunner

    from tracekit.cli import main

    r = CliRunner().invoke(main, args, prog_name="tracekit")
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr == expected + "\n"
