"""tracekit diff: deltas equal independent computations (json-module pass, hand-written SQL)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import tracekit
from tests import procs, shape_work
from tests.conftest import SHARED_TRACES
from tests.kineto_oracle import load
from tests.latency_oracle import oracle_steps
from tracekit.cli import main
from tracekit.compare.diff import diff_runs
from tracekit.compare.render import render
from tracekit.store.cache import store_path_for

CONTROL = SHARED_TRACES / "kineto_trace_diff_control_hta.json.gz"
TEST = SHARED_TRACES / "kineto_trace_diff_test_hta.json.gz"
needs_shared = pytest.mark.skipif(not CONTROL.exists(), reason=f"{SHARED_TRACES} is absent")


@pytest.fixture(scope="module")
def hta_pair() -> tuple[Path, Path]:
    return CONTROL, TEST  # read only: their stores are built once per run


def json_calls(path: Path, cat: str, with_shape: bool) -> dict[tuple[str, str], list[float]]:
    """Durations (ms) per (name, shape) of complete events of `cat`, with Python's json module."""
    doc = load(path)
    calls: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() != cat:
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            continue
        dims = e.get("args", {}).get("Input Dims")
        shape = json.dumps(dims, separators=(",", ":")) if with_shape and dims is not None else ""
        calls[(e["name"], shape)].append(round(dur * 1000) / 1e6)
    return calls


@needs_shared
def test_hta_kernel_deltas_match_json_pass(hta_pair: tuple[Path, Path]) -> None:
    control, test = hta_pair
    result = diff_runs([control], [test])
    before, after = json_calls(control, "kernel", False), json_calls(test, "kernel", False)
    assert {(i.name, i.shape) for i in result.kernels} == before.keys() | after.keys()
    for i in result.kernels:
        b, a = before.get((i.name, i.shape), []), after.get((i.name, i.shape), [])
        assert (i.before_count, i.after_count) == (len(b), len(a))
        assert i.delta_ms == pytest.approx(sum(a) - sum(b), abs=1e-6)
        assert i.count_part_ms + i.time_part_ms == pytest.approx(i.delta_ms, abs=1e-9)
        if b and a:
            assert i.before_mean_ms == pytest.approx(sum(b) / len(b))
            assert i.after_mean_ms == pytest.approx(sum(a) / len(a))
        want = "appeared" if not b else "vanished" if not a else None
        if want:
            assert i.status == want
        elif abs(sum(a) / len(a) / (sum(b) / len(b)) - 1) < 0.02:
            assert i.status == "same", (i.name, i.status)
    statuses = {i.status for i in result.kernels}
    assert {"slower", "faster", "appeared", "vanished", "same"} <= statuses
    assert "different GPUs (NVIDIA A100-PG509-200 vs Tesla V100-SXM2-16GB)" in (
        result.headline.context
    )
    # Ops: inclusive time per call, by name and shape.
    ops_b, ops_a = json_calls(control, "cpu_op", True), json_calls(test, "cpu_op", True)
    assert {(i.name, i.shape) for i in result.ops} == ops_b.keys() | ops_a.keys()
    for i in result.ops:
        b, a = ops_b.get((i.name, i.shape), []), ops_a.get((i.name, i.shape), [])
        assert (i.before_count, i.after_count) == (len(b), len(a))
        assert i.delta_ms == pytest.approx(sum(a) - sum(b), abs=1e-6)


def _linear(xs: list[float], q: float) -> float:
    """quantile_cont: linear interpolation between the sorted values."""
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


@needs_shared
def test_hta_end_to_end_and_gpu_busy_match_sql(hta_pair: tuple[Path, Path]) -> None:
    control, test = hta_pair
    result = diff_runs([control], [test])
    e2e = next(s for s in result.stages if s.stage == "end_to_end")
    for side, path in (("before", control), ("after", test)):
        # step latency to the end of its GPU work, from a plain json pass (latency_oracle)
        lat = sorted(s["latency_ms"] for s in oracle_steps(path, r"ProfilerStep#"))
        n = len(lat)
        p50, p99 = _linear(lat, 0.5), _linear(lat, 0.99)
        with tracekit.open(path) as t:
            # GPU busy, independently: merge intervals in Python.
            rows = t.con.execute(
                "SELECT start_ns, end_ns FROM events WHERE kind IN "
                "('kernel', 'memcpy', 'memset') ORDER BY 1, 2"
            ).fetchall()
        busy, cur_s, cur_e = 0, None, None
        for s, e in rows:
            if cur_e is None or s > cur_e:
                busy += (cur_e - cur_s) if cur_e is not None else 0
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        assert n == 6
        assert getattr(e2e.metric("p50_ms"), side) == pytest.approx(p50)
        assert getattr(e2e.metric("p99_ms"), side) == pytest.approx(p99)
        assert getattr(result.gpu[0], side) == pytest.approx(busy / 1e6)


# --- the project's own example: stages differ for real ---------------------------------------


def make_trace(path: Path, size: int, requests: int = 8) -> Path:
    """A torch.profiler CPU trace with tracekit request/stage ranges and matmuls of `size`.

    One thread and a warm-up: OpenMP threads descheduled on a loaded 2-core machine once made
    48x48 matmuls take 44-79 ms, slower than 192x192 ones. Tests comparing two such traces use
    sizes whose work differs by 1000x, far beyond that noise."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(size, size)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(3):
            x @ x
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(requests):
                with record_function("tracekit:request"):
                    with record_function("tracekit:preprocess"):
                        y = x * 2 + 1
                    with record_function("tracekit:inference"):
                        for _ in range(3):
                            y = y @ x
                    with record_function("tracekit:postprocess"):
                        y.argmax()
    finally:
        torch.set_num_threads(threads)
    prof.export_chrome_trace(str(path))
    return path


def capture_example(run_dir: Path, padding: str) -> Path:
    """A real `tracekit capture` (torch.profiler, CPU) of examples/infer.py."""
    pytest.importorskip("torch")
    infer = Path(__file__).resolve().parent.parent / "examples" / "infer.py"
    res = procs.run(
        [sys.executable, "-m", "tracekit", "capture", "-o", str(run_dir), "--no-nsys", "--",
         sys.executable, str(infer), "--requests", "12", "--padding", padding],
        capture_output=True, text=True, )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return run_dir / "torch.pt.trace.json"


@pytest.fixture(scope="module")
def padding_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example before/after a real change: padding to max length vs length buckets."""
    d = tmp_path_factory.mktemp("padding")
    return capture_example(d / "max", "max"), capture_example(d / "bucket", "bucket")


STAGE_SQL = """
WITH per AS (
    SELECT request_id, stage, sum(dur_ns) AS d FROM stages
    WHERE request_id IS NOT NULL GROUP BY ALL
    UNION ALL SELECT request_id, 'end_to_end', dur_ns FROM requests
    UNION ALL SELECT r.request_id, 'unattributed',
                     r.dur_ns - (SELECT coalesce(sum(s.dur_ns), 0) FROM stages s
                                 WHERE s.request_id = r.request_id)
    FROM requests r
)
SELECT stage, quantile_cont(d, 0.5) / 1e6, quantile_cont(d, 0.9) / 1e6,
       quantile_cont(d, 0.99) / 1e6, avg(d) / 1e6
FROM per GROUP BY stage ORDER BY stage
"""


def stage_figures(path: Path) -> dict[str, tuple[float, ...]]:
    con = duckdb.connect(str(store_path_for(path)), read_only=True)
    try:
        return {r[0]: r[1:] for r in con.execute(STAGE_SQL).fetchall()}
    finally:
        con.close()


def test_stage_deltas_match_independent_sql(padding_pair: tuple[Path, Path]) -> None:
    before_path, after_path = padding_pair
    result = diff_runs([before_path], [after_path])
    before, after = stage_figures(before_path), stage_figures(after_path)
    assert (
        {s.stage for s in result.stages}
        == set(before)
        == {"end_to_end", "inference", "postprocess", "preprocess", "unattributed"}
    )
    for s in result.stages:
        for k, m in enumerate(("p50_ms", "p90_ms", "p99_ms", "mean_ms")):
            d = s.metric(m)
            assert d.before == pytest.approx(before[s.stage][k], abs=1e-9)
            assert d.after == pytest.approx(after[s.stage][k], abs=1e-9)
            assert d.delta == pytest.approx(after[s.stage][k] - before[s.stage][k], abs=1e-9)
    # Shorter sequences do less work: compared by the shapes the ops ran on, not by their
    # times (two captures' times depend on the machine's load while each ran).
    assert shape_work.bmm_macs(after_path) * 2 < shape_work.bmm_macs(before_path)
    bmm = [i for i in result.ops if i.name in ("aten::bmm", "aten::mm", "aten::addmm")]
    assert "appeared" in {i.status for i in bmm}  # bucketed shapes are new shapes


def test_n_vs_n_runs_give_noise_estimate(tmp_path: Path) -> None:
    for side, size in (("base", 192), ("cand", 48)):
        for k in range(2):
            (tmp_path / side / f"run{k}").mkdir(parents=True)
            make_trace(tmp_path / side / f"run{k}" / "trace.json", size, requests=6)
    result = diff_runs([tmp_path / "base"], [tmp_path / "cand"])
    assert len(result.baseline.runs) == len(result.candidate.runs) == 2
    assert result.baseline.requests == 12
    p50 = next(s for s in result.stages if s.stage == "inference").metric("p50_ms")
    assert p50.noise is not None and p50.noise.spread is not None
    assert p50.noise.ci_low <= p50.delta <= p50.noise.ci_high  # type: ignore[operator]
    again = diff_runs([tmp_path / "base"], [tmp_path / "cand"])
    assert again.stages == result.stages  # fixed seed: reproducible


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_cli_diff_formats_and_no_overwrite(padding_pair: tuple[Path, Path], tmp_path: Path) -> None:
    before, after = padding_pair
    runner = CliRunner()
    out = tmp_path / "diff.html"
    r = runner.invoke(main, ["diff", str(before), str(after), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output == f"Wrote {out}\n"
    parser = _Collect()
    parser.feed(out.read_text())
    csp = [a for t, a in parser.tags if t == "meta" and a.get("http-equiv")]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")
    assert not [a for t, a in parser.tags if t in ("link", "img")]
    scripts = [a for t, a in parser.tags if t == "script"]
    assert scripts == [{}]  # one inline script (table sorting), allowed by its hash only
    assert "script-src 'sha256-" in (csp[0]["content"] or "")
    r = runner.invoke(main, ["diff", str(before), str(after), "-o", str(out)])
    assert r.exit_code == 2 and "--force" in r.output
    assert (
        runner.invoke(main, ["diff", str(before), str(after), "-o", str(out), "--force"]).exit_code
        == 0
    )
    r = runner.invoke(main, ["diff", str(before), str(after), "--format", "json"])
    data = json.loads(r.output)
    assert data["format"] == "tracekit-diff/2"
    assert {s["stage"] for s in data["stages"]} >= {"inference", "end_to_end", "unattributed"}
    r = runner.invoke(main, ["diff", str(before), str(after), "--format", "md"])
    assert r.exit_code == 0 and "| inference | p50_ms |" in r.output
    result = diff_runs([before], [after])
    assert "baseline max/torch.pt.trace.json" in render(result, "table")
