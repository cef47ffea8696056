"""Start-up stays lean: `tracekit --help` imports no command and no heavy library, and a
query on a built store imports neither polars nor numpy nor pyarrow (their imports were
most of a warm `tracekit sql`). Structure only: nothing here is timed."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from pathlib import Path

from tests import procs
from tests.conftest import SAMPLE_TRACES
from tracekit.cli import COMMANDS, SUMMARIES

HEAVY = ("duckdb", "polars", "numpy", "pyarrow", "orjson", "jinja2")

# Runs the CLI in a fresh interpreter, then prints which of HEAVY and of tracekit.commands.*
# were imported (stdout of the command itself goes to a file).
_PROBE = """
import contextlib, io, json, sys
from tracekit.cli import main
out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # (commands write bytes to .buffer)
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:], standalone_mode=False)
    except SystemExit:
        pass
heavy = {heavy!r}
loaded = sorted(m for m in sys.modules if m in heavy or m.startswith("tracekit.commands."))
out.flush()
print(json.dumps({{"loaded": loaded, "out": out.buffer.getvalue().decode()}}))
"""


def _probe(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    code = _PROBE.format(heavy=HEAVY)
    r = procs.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    result: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def test_help_imports_no_command_and_no_heavy_library() -> None:
    result = _probe("--help")
    assert result["loaded"] == [], result["loaded"]
    for name in COMMANDS:
        assert f"\n  {name} " in str(result["out"])


def test_the_listed_summaries_are_the_commands_own_help() -> None:
    """cli.SUMMARIES (what --help lists without importing the commands) is the first
    sentence of each command's help."""
    assert list(SUMMARIES) == list(COMMANDS)
    for name in COMMANDS:
        command = importlib.import_module(f"tracekit.commands.{name}").command
        words = " ".join((command.help or "").split())
        assert words.startswith(SUMMARIES[name]), name
        assert SUMMARIES[name].endswith(".") and ". " not in SUMMARIES[name], name


def test_a_query_on_a_built_store_imports_neither_polars_nor_numpy(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes((SAMPLE_TRACES / "torch.pt.trace.json").read_bytes())
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")}
    query = "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind"
    built = _probe("sql", str(trace), query, env=env)  # (builds the store: numpy may load)
    warm = _probe("sql", str(trace), query, env=env)
    assert warm["out"] == built["out"] and "cpu_op" in str(warm["out"])
    assert not {"polars", "numpy", "pyarrow", "jinja2"} & set(warm["loaded"]), warm["loaded"]  # type: ignore[arg-type]
    as_json = _probe("sql", str(trace), query, "--format", "json", env=env)
    assert "polars" not in as_json["loaded"] and "numpy" not in as_json["loaded"]
    rows = json.loads(str(as_json["out"]))
    assert {r["kind"] for r in rows} >= {"cpu_op"}


# A stand-in for pandas that notes who imported it: DuckDB's Python client imports pandas at
# its first bound parameter (to ask whether the value is pandas.NaT), 0.3 s where installed.
_FAKE_PANDAS = """
import pathlib, traceback
pathlib.Path({marker!r}).write_text("".join(traceback.format_stack()))
raise ImportError("a stand-in: tracekit should not have imported pandas")
"""


def test_no_command_binds_a_value_that_makes_duckdb_import_pandas(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "pandas"
    fake.mkdir(parents=True)
    marker = tmp_path / "pandas-imported"
    (fake / "__init__.py").write_text(_FAKE_PANDAS.format(marker=str(marker)))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"),
           "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip

    def run(*args: str) -> None:
        r = procs.run([sys.executable, *args], capture_output=True, text=True,
                           env=env, cwd=tmp_path)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert not marker.exists(), f"{args}: pandas imported from\n{marker.read_text()}"

    # The probe sees DuckDB's import: one bound value is enough.
    r = procs.run([sys.executable, "-c", "import duckdb; duckdb.connect().execute("
                        "'SELECT $a', {'a': 1})"], env=env, capture_output=True)  # fmt: skip
    assert r.returncode == 0 and marker.exists(), r.stderr
    marker.unlink()

    # A capture's run folder: both traces, and the attribute sidecars of its stages.
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLE_TRACES, run_dir)
    run("-m", "tracekit", "ingest", str(run_dir), "--jobs", "1")
    run("-m", "tracekit", "sql", str(run_dir), "SELECT count(*) FROM attributes")
    run("-m", "tracekit", "report", str(run_dir), "--format", "md", "-o", "r.md")
    assert (tmp_path / "r.md").read_text().count("## Trace ") == 2
