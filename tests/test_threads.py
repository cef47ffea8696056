"""TRACEKIT_THREADS caps DuckDB's threads a connection (the suite runs with 1: one worker a
core, tests/conftest.py). A query's rows and their order must not depend on it: every named
query, on traces of each format, gives the same rows in the same order on 1 thread and on 4
(an ORDER BY that leaves ties, or a window without one, shows here as a different order)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import SAMPLE_TRACES, shared_traces
from tracekit.cli import main
from tracekit.sql import all_queries
from tracekit.store.build import THREADS_ENV

# A Kineto trace with requests and stages, a CUDA-graph decode, an nsys export on two devices.
TRACES = ("kineto_b300_sglang_qwen3-30b-a3b_decode_bs16_cudagraph_tracelens.json.gz",
          "nsys_2026_h100x2_mfu_before.sqlite")  # fmt: skip


def _rows(paths: list[Path], threads: int) -> dict[str, list[tuple[object, ...]]]:
    with tracekit.open(paths) as t:
        assert t.con.execute("SELECT current_setting('threads')").fetchone() == (threads,)
        return {name: t.query(name).rows() for name in all_queries()}


def _same(a: object, b: object) -> bool:
    """Equal, floats to 1e-9 relative (threads sum a double's parts in another order)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (a != a and b != b)
    return a == b


def test_rows_and_their_order_do_not_depend_on_the_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [SAMPLE_TRACES, *(p for p in shared_traces("*") if p.name in TRACES)]
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))  # built on each setting
    got = {}
    for threads in (1, 4):
        monkeypatch.setenv(THREADS_ENV, str(threads))
        got[threads] = _rows(paths, threads)
        shutil.rmtree(tmp_path / "cache")
    for name in all_queries():
        one, four = got[1][name], got[4][name]
        assert len(one) == len(four), name
        for i, (a, b) in enumerate(zip(one, four, strict=True)):
            assert len(a) == len(b) and all(map(_same, a, b)), (name, i, a, b)
    assert sum(bool(rows) for rows in got[1].values()) >= len(all_queries()) // 2


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_threads_setting_is_one_line_exit_2(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(THREADS_ENV, value)
    r = CliRunner().invoke(main, ["sql", str(SAMPLE_TRACES), "SELECT 1 AS one"])
    assert r.exit_code == 2, r.output
    assert r.output == f"Error: {THREADS_ENV}={value!r}: not a whole number of threads >= 1\n"
